"""Writes the benchmark fixtures (template + data) shared by the criterion bench and the Go
oracle's bench-template mode: the seed NetworkPolicy over one Service, the seed Ingress over 50
Services, and a 200-line Helm-values-style template. Reuses the oracle's Service generator."""
import json, os, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "../../../../shared/oracle/bench"))
sys.argv = [sys.argv[0], tempfile.mkdtemp()]  # make_inputs writes its own inputs there
import make_inputs as mi  # noqa: E402  (the oracle's own realistic Service objects)

INGRESS = open(os.path.join(here, "ingress.tmpl")).read()
HELM = open(os.path.join(here, "helm-values.tmpl")).read()

def svc(i):
    s = mi.service(i)
    s["spec"]["ports"] = [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                          {"name": "https", "port": 443 if i % 2 == 0 else 8443, "protocol": "TCP", "targetPort": 8443}]
    return s

cluster = {"apiVersion": "lib.projectsveltos.io/v1beta1", "kind": "SveltosCluster",
           "metadata": {"name": "workload", "namespace": "default", "labels": {"env": "production", "region": "eu-west-1"}}}
fixtures = {
    "networkpolicy": {"template": mi.NETPOL, "data": {"Resource": mi.service(0), "MatchingResource": {"APIVersion": "v1", "Kind": "Service", "Namespace": "ns-0", "Name": "svc-0000"}, "Cluster": cluster}},
    "ingress-50": {"template": INGRESS, "data": {"Resources": [svc(i) for i in range(50)], "Cluster": cluster}},
    "helm-values-200": {"template": HELM, "data": {"Resource": svc(3), "Cluster": cluster}},
}
for name, f in fixtures.items():
    with open(os.path.join(here, "data", name + ".json"), "w") as out:
        json.dump(f, out, indent=1, sort_keys=True)
        out.write("\n")

//! The applier's pure part: desired objects and owned objects in, an apply plan out.
//! Referenced ConfigMaps/Secrets are applied before the ClusterProfiles that point at them;
//! stale ClusterProfiles are deleted before the objects they referenced.

use serde_json::Value;
use sluice_proto::v1 as pb;

/// What to do, in order.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub apply: Vec<Value>,
    pub delete: Vec<pb::ObjectRef>,
}

fn identity(r: &pb::ObjectRef) -> (String, String, String) {
    (r.kind.clone(), r.namespace.clone(), r.name.clone())
}

fn rank(kind: &str) -> u8 {
    if kind == "ClusterProfile" {
        1
    } else {
        0
    }
}

/// Plans the writes: everything desired is applied (server-side apply is idempotent), and
/// everything owned but not desired is deleted.
pub fn plan(desired: &[Value], existing: &[Value]) -> Plan {
    let mut apply: Vec<Value> = desired.to_vec();
    apply.sort_by_key(|o| rank(o.get("kind").and_then(Value::as_str).unwrap_or("")));
    let wanted: Vec<_> = desired
        .iter()
        .map(|o| identity(&sluice_wire::object_ref(o)))
        .collect();
    let mut delete: Vec<pb::ObjectRef> = existing
        .iter()
        .map(sluice_wire::object_ref)
        .filter(|r| !wanted.contains(&identity(r)))
        .collect();
    delete.sort_by_key(|r| std::cmp::Reverse(rank(&r.kind)));
    Plan { apply, delete }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(api_version: &str, k: &str, ns: &str, name: &str) -> Value {
        json!({"apiVersion": api_version, "kind": k, "metadata": {"namespace": ns, "name": name}})
    }

    #[test]
    fn applies_references_first_and_deletes_profiles_first() {
        let desired = vec![
            obj(
                "config.projectsveltos.io/v1beta1",
                "ClusterProfile",
                "",
                "sveltos-a",
            ),
            obj("v1", "ConfigMap", "projectsveltos", "sveltos-b"),
        ];
        let existing = vec![
            obj("v1", "ConfigMap", "projectsveltos", "old-cm"),
            obj(
                "config.projectsveltos.io/v1beta1",
                "ClusterProfile",
                "",
                "old-cp",
            ),
            obj(
                "config.projectsveltos.io/v1beta1",
                "ClusterProfile",
                "",
                "sveltos-a",
            ),
        ];
        let p = plan(&desired, &existing);
        let applied: Vec<_> = p
            .apply
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(applied, ["ConfigMap", "ClusterProfile"]);
        let deleted: Vec<_> = p.delete.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(deleted, ["old-cp", "old-cm"]);
    }

    #[test]
    fn nothing_desired_deletes_everything_owned() {
        let existing = vec![obj("v1", "Secret", "projectsveltos", "s")];
        let p = plan(&[], &existing);
        assert!(p.apply.is_empty());
        assert_eq!(p.delete.len(), 1);
        assert_eq!(p.delete[0].kind, "Secret");
    }
}

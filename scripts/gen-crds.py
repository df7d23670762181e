#!/usr/bin/env python3
"""Writes the CustomResourceDefinitions of k8s/crds/ from facts and descriptions.

Inputs (all in k8s/crds/):
  facts/sveltos-crd-facts.json   facts of Sveltos's CRDs (v1beta1): every field path with type, required,
                                 default, enum, format, limits and x-kubernetes-* markers
  facts/legacy-facts.json        the legacy v1alpha1 versions sluice still serves, as facts plus
                                 "include" entries that copy a subtree from another kind/version
  facts/capi-cluster-facts.json  the CAPI Cluster fields sluice reads and CAPI's main fields
  descriptions.txt               our own description of every field path (see its header)

Outputs: k8s/crds/<plural>.yaml (capi-clusters.yaml for CAPI). Python 3.11 standard library only.

  python3 scripts/gen-crds.py          writes the files
  python3 scripts/gen-crds.py --check  fails if a file is not what the inputs give

It fails, naming every path, when a field has no description or a description names no field.
"""

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRDS = ROOT / "k8s" / "crds"

# Keys of a fact that become schema keywords as they are.
SCHEMA_KEYS = (
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "nullable",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
)


class GenError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Facts


def load_facts():
    """All CRDs as {name: crd} with fully expanded field lists, in a stable order."""
    sources = [
        ("facts/sveltos-crd-facts.json", "Sveltos"),
        ("facts/capi-cluster-facts.json", "CAPI"),
    ]
    crds = {}
    for file, origin in sources:
        data = json.loads((CRDS / file).read_text())
        for crd in data["crds"]:
            crd = dict(crd)
            crd["origin"] = origin
            crds[crd["name"]] = crd
    legacy = json.loads((CRDS / "facts/legacy-facts.json").read_text())
    for crd in legacy.get("crds", []):
        crd = dict(crd)
        crd["origin"] = "legacy"
        crds[crd["name"]] = crd
    for extra in legacy.get("versions", []):
        crd = crds.get(extra["crd"])
        if crd is None:
            raise GenError(f"legacy-facts.json: version {extra['name']} names unknown CRD {extra['crd']}")
        crd["versions"] = crd["versions"] + [{k: v for k, v in extra.items() if k != "crd"}]
    for crd in crds.values():
        for version in crd["versions"]:
            version["fields"] = expand(crds, crd, version)
    return crds


def find_version(crds, kind, version):
    for crd in crds.values():
        if crd["kind"] == kind:
            for v in crd["versions"]:
                if v["name"] == version:
                    return v
    raise GenError(f"include names {kind}/{version}, which is not in the facts")


def under(path, prefix):
    """True when path is prefix or a descendant of it ("." is the root, above every path)."""
    if prefix == ".":
        return True
    return path == prefix or path.startswith((prefix + ".", prefix + "[", prefix + "{"))


def expand(crds, crd, version):
    """A version's field list with every {"include": ...} entry replaced by the fields it copies.

    {"include": "Kind/version", "path": "spec.x", "as": "spec.y", "except": ["spec.x.z"]} copies
    spec.x and its descendants (renamed under spec.y, default the same path), leaving out the
    listed subtrees.
    """
    out = []
    for entry in version["fields"]:
        if "include" not in entry:
            out.append(entry)
            continue
        kind, _, vname = entry["include"].partition("/")
        source = find_version(crds, kind, vname)
        src_fields = expand(crds, None, source) if any("include" in f for f in source["fields"]) else source["fields"]
        prefix = entry["path"]
        target = entry.get("as", prefix)
        excluded = entry.get("except", [])
        copied = [
            dict(f, path=f["path"] if target == prefix else target + f["path"][len(prefix) :])
            for f in src_fields
            if under(f["path"], prefix) and not any(under(f["path"], e) for e in excluded)
        ]
        if not copied:
            name = crd["name"] if crd else "?"
            raise GenError(f"{name} {version['name']}: include of {prefix} from {entry['include']} copies nothing")
        out.extend(copied)
    seen = set()
    for f in out:
        if f["path"] in seen:
            raise GenError(f"{crd['name'] if crd else '?'} {version['name']}: path {f['path']} given twice")
        seen.add(f["path"])
    return out


# ---------------------------------------------------------------------------------------------
# Descriptions


def load_descriptions():
    """descriptions.txt as ({section: {path: text}}, [(from, to)] aliases)."""
    sections = {}
    aliases = []
    section = None
    last = None
    for number, raw in enumerate((CRDS / "descriptions.txt").read_text().splitlines(), 1):
        where = f"descriptions.txt:{number}"
        if not raw.strip() or raw.lstrip().startswith("#"):
            last = None
            continue
        if raw.startswith("["):
            name = raw.strip()[1:-1].strip()
            section = name
            sections.setdefault(name, {})
            last = None
            continue
        if raw.startswith("    "):
            if last is None:
                raise GenError(f"{where}: continuation line without a description before it")
            sec, path = last
            sections[sec][path] += " " + raw.strip()
            continue
        if section is None:
            raise GenError(f"{where}: description before any [section]")
        if section == "same":
            left, sep, right = raw.partition("=")
            if not sep:
                raise GenError(f"{where}: [same] lines are 'path = path'")
            aliases.append((left.strip(), right.strip()))
            continue
        path, _, text = raw.partition(" ")
        if not text.strip():
            raise GenError(f"{where}: {path} has no text")
        if path in sections[section]:
            raise GenError(f"{where}: {path} described twice in [{section}]")
        sections[section][path] = text.strip()
        last = (section, path)
    return sections, aliases


class Describer:
    """Finds each field's description and remembers which entries were used."""

    def __init__(self, sections, aliases):
        self.sections = sections
        self.aliases = aliases
        self.used = set()

    def lookup(self, kind, version, path, depth=0):
        for section in (f"{kind} {version}", kind, "*"):
            text = self.sections.get(section, {}).get(path)
            if text is not None:
                self.used.add((section, path))
                return text
        if depth > 8:
            return None
        for source, target in self.aliases:
            if under(path, source):
                found = self.lookup(kind, version, target + path[len(source):], depth + 1)
                if found is not None:
                    self.used.add(("same", source))
                    return found
        return None

    def unused(self):
        out = [f"[{s}] {p}" for s, paths in self.sections.items() for p in paths if (s, p) not in self.used]
        out += [f"[same] {s}" for s, _ in self.aliases if ("same", s) not in self.used]
        return out


# ---------------------------------------------------------------------------------------------
# Schemas


def parent_of(path):
    """(parent path, relation, property name) of a field path."""
    if path.endswith("[]"):
        return path[:-2], "items", None
    if path.endswith("{}"):
        return path[:-2], "additionalProperties", None
    if "." in path:
        parent, _, name = path.rpartition(".")
        return parent, "properties", name
    return ".", "properties", path


def build_schema(crd, version, describer):
    nodes = {}
    missing = []
    for field in version["fields"]:
        path = field["path"]
        node = {k: field[k] for k in SCHEMA_KEYS if k in field}
        text = describer.lookup(crd["kind"], version["name"], path)
        if text is None:
            missing.append(path)
        else:
            node["description"] = text
        nodes[path] = node
        if path == ".":
            continue
        parent_path, relation, name = parent_of(path)
        parent = nodes.get(parent_path)
        if parent is None:
            raise GenError(f"{crd['name']} {version['name']}: {path} comes before its parent {parent_path}")
        if relation == "properties":
            parent.setdefault("properties", {})[name] = node
            if field.get("required"):
                parent.setdefault("required", []).append(name)
        else:
            parent[relation] = node
    return nodes["."], missing


def crd_object(crd, describer, missing):
    names = {
        "kind": crd["kind"],
        "listKind": crd["kind"] + "List",
        "plural": crd["plural"],
        "singular": crd.get("singular", crd["kind"].lower()),
    }
    if crd.get("shortNames"):
        names["shortNames"] = crd["shortNames"]
    versions = []
    for v in crd["versions"]:
        schema, lacking = build_schema(crd, v, describer)
        missing.extend(f"{crd['kind']} {v['name']} {p}" for p in lacking)
        entry = {"name": v["name"], "served": v["served"], "storage": v["storage"]}
        if v.get("deprecated"):
            entry["deprecated"] = True
            if v.get("deprecationWarning"):
                entry["deprecationWarning"] = v["deprecationWarning"]
        entry["schema"] = {"openAPIV3Schema": schema}
        if "status" in v.get("subresources", []):
            entry["subresources"] = {"status": {}}
        versions.append(entry)
    metadata = {"name": crd["name"]}
    conversion = {"strategy": "None"}
    if len(versions) > 1:
        # Kinds served in two versions convert through the watcher's webhook (ADR 0019); the
        # caBundle is injected by cert-manager from the webhook's Certificate.
        metadata["annotations"] = {"cert-manager.io/inject-ca-from": f"{WEBHOOK_NAMESPACE}/{WEBHOOK_SERVICE}"}
        conversion = {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {
                    "service": {
                        "namespace": WEBHOOK_NAMESPACE,
                        "name": WEBHOOK_SERVICE,
                        "path": "/convert",
                        "port": 443,
                    },
                },
            },
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": crd["group"],
            "names": names,
            "scope": crd["scope"],
            "conversion": conversion,
            "versions": versions,
        },
    }


WEBHOOK_NAMESPACE = "sluice-system"
WEBHOOK_SERVICE = "sluice-conversion-webhook"


# ---------------------------------------------------------------------------------------------
# YAML output (block style, keys of schemas sorted as controller-gen does, everything else in order)

PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")
RESERVED = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}


def scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if value is None:
        return "null"
    text = str(value)
    if PLAIN.match(text) and text.lower() not in RESERVED:
        return text
    return json.dumps(text, ensure_ascii=False)


def emit(value, indent, out, sort):
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            out[-1] += " {}"
            return
        keys = sorted(value) if sort else list(value)
        for k in keys:
            v = value[k]
            child_sort = sort or k in ("openAPIV3Schema",)
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{scalar(k)}:")
                emit(v, indent + 1, out, child_sort)
            elif isinstance(v, dict):
                out.append(f"{pad}{scalar(k)}: {{}}")
            elif isinstance(v, list):
                out.append(f"{pad}{scalar(k)}: []")
            else:
                out.append(f"{pad}{scalar(k)}: {scalar(v)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                start = len(out)
                emit(item, indent + 1, out, sort)
                first = out[start]
                out[start] = pad + "- " + first[len(pad) + 2 :]
            else:
                out.append(f"{pad}- {scalar(item)}")


def to_yaml(obj):
    out = []
    emit(obj, 0, out, False)
    return "\n".join(out) + "\n"


def header(crd):
    served = ", ".join(
        f"{v['name']}{' (storage)' if v['storage'] else ''}" for v in crd["versions"] if v["served"]
    )
    scope = "namespaced" if crd["scope"] == "Namespaced" else "cluster-scoped"
    lines = [
        f"# {crd['kind']} ({crd['group']}), {scope}; served versions: {served}.",
        "# Generated by scripts/gen-crds.py from k8s/crds/facts/ and k8s/crds/descriptions.txt: do not edit.",
    ]
    if crd["origin"] == "Sveltos":
        lines.append("# The v1beta1 schema carries the facts of Sveltos's CRD (" + SVELTOS_SOURCE + ");")
        lines.append("# the descriptions are sluice's own words.")
    if crd["origin"] == "CAPI":
        lines.append("# The fields sluice reads and Cluster API's main fields (cluster.x-k8s.io/v1beta1);")
        lines.append("# descriptions are sluice's own words.")
    if crd["origin"] == "legacy":
        lines.append("# A legacy kind, v1alpha1 only (docs/adr/0017-crd-schemas.md): its fields are in")
        lines.append("# k8s/crds/facts/legacy-facts.json, reusing the EventTrigger v1beta1 shapes.")
    if len(crd["versions"]) > 1:
        lines.append("# v1alpha1 is the legacy shape (docs/adr/0017-crd-schemas.md). Objects are stored in the storage")
        lines.append("# version and converted by the watcher's conversion webhook (docs/adr/0019-crd-conversion-webhook.md).")
    return "\n".join(lines) + "\n"


SVELTOS_SOURCE = ""


def generate():
    global SVELTOS_SOURCE
    SVELTOS_SOURCE = json.loads((CRDS / "facts/sveltos-crd-facts.json").read_text())["source"].split(":")[0]
    crds = load_facts()
    sections, aliases = load_descriptions()
    describer = Describer(sections, aliases)
    missing = []
    files = {}
    for crd in crds.values():
        obj = crd_object(crd, describer, missing)
        file = "capi-clusters.yaml" if crd["origin"] == "CAPI" else f"{crd['plural']}.yaml"
        files[file] = header(crd) + to_yaml(obj)
    problems = []
    if missing:
        problems.append("fields without a description:\n  " + "\n  ".join(missing))
    unused = describer.unused()
    if unused:
        problems.append("descriptions of no field:\n  " + "\n  ".join(unused))
    if problems:
        raise GenError("\n".join(problems))
    return files


def main(argv):
    check = "--check" in argv
    try:
        files = generate()
    except GenError as error:
        print(f"gen-crds: {error}", file=sys.stderr)
        return 1
    stale = []
    for file, text in files.items():
        path = CRDS / file
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(file)
        else:
            path.write_text(text)
    if stale:
        print("gen-crds: out of date (run python3 scripts/gen-crds.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Validates Kubernetes custom resources (the ServiceMonitor) against their CRDs, strictly.

kubernetes-validate ships schemas for the built-in kinds only: given a custom resource it prints
"WARN ... Couldn't find schema" and passes it. This script does the check that warning skips.
Each document's apiVersion and kind are looked up among the CustomResourceDefinitions in
--crds (copies of the upstream CRDs, see deploy/schemas/README.md); a document with no CRD
fails. The CRD's openAPIV3Schema is turned into a JSON schema the way the API server reads it
with strict field validation: an object with declared properties accepts no other property
(unless it sets additionalProperties or x-kubernetes-preserve-unknown-fields), int-or-string
fields accept either, and `metadata` is checked against ObjectMeta from kubernetes-validate's
strict schemas. CEL rules (x-kubernetes-validations) are not evaluated; the script says how many
it skipped, and the CRDs kept here have none.

Usage: validate_custom_resources.py --crds DIR FILE...   (exit 1 on any finding)

Runs in the lint environment scripts/lint-deploy.sh creates (PyYAML, jsonschema and
kubernetes-validate come with kubernetes-validate).
"""

import argparse
import copy
import pathlib
import sys

import jsonschema
import yaml
from kubernetes_validate import utils as kv
from referencing import Registry, Resource

DEFINITIONS_URI = "https://kubernetes.io/api/_definitions.json"
OBJECT_META = DEFINITIONS_URI + "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def load_crds(directory):
    """(group, version, kind) -> (openAPIV3Schema, source file) for every served version."""
    crds = {}
    for path in sorted(pathlib.Path(directory).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                if version.get("served", True):
                    key = (spec["group"], version["name"], spec["names"]["kind"])
                    crds[key] = (version["schema"]["openAPIV3Schema"], path.name)
    return crds


def strict_schema(node, counts):
    """The JSON-schema reading of one OpenAPI v3 node, closed to unknown fields."""
    if isinstance(node, list):
        return [strict_schema(item, counts) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "x-kubernetes-validations":
            counts["cel"] += len(value)
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: strict_schema(sub, counts) for name, sub in value.items()}
        elif key.startswith("x-kubernetes-") or key in ("description", "example", "externalDocs"):
            continue
        else:
            out[key] = strict_schema(value, counts)
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def resource_schema(open_api, group, version, kind, counts):
    schema = strict_schema(copy.deepcopy(open_api), counts)
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"const": f"{group}/{version}"}
    props["kind"] = {"const": kind}
    props["metadata"] = {"$ref": OBJECT_META}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata"})
    schema["additionalProperties"] = False
    return schema


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crds", required=True, help="directory of CustomResourceDefinition YAML")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()

    crds = load_crds(args.crds)
    if not crds:
        sys.exit(f"no CustomResourceDefinition found in {args.crds}")
    k8s_version = kv.latest_version()
    definitions = kv.schema_contents(
        f"kubernetes-json-schema/v{k8s_version}-local-strict/_definitions.json", k8s_version
    )
    registry = Registry().with_resource(DEFINITIONS_URI, Resource.from_contents(definitions))

    failures = 0
    checked = 0
    for name in args.files:
        for doc in yaml.safe_load_all(pathlib.Path(name).read_text()):
            if not doc:
                continue
            api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
            where = f"{name}: {kind}/{doc.get('metadata', {}).get('name', '?')}"
            group, _, version = api_version.rpartition("/")
            found = crds.get((group, version, kind))
            if found is None:
                print(f"ERROR {where}: no CRD for {api_version} {kind} in {args.crds}")
                failures += 1
                continue
            open_api, source = found
            counts = {"cel": 0}
            schema = resource_schema(open_api, group, version, kind, counts)
            validator = jsonschema.Draft202012Validator(schema, registry=registry)
            errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
            for error in errors:
                path = ".".join(str(p) for p in error.path) or "(root)"
                print(f"ERROR {where}: {path}: {error.message}")
            failures += len(errors)
            checked += 1
            if not errors:
                cel = f", {counts['cel']} CEL rules not evaluated" if counts["cel"] else ""
                print(f"INFO {where} passed against {source} (strict{cel})")
    if failures:
        print(f"{failures} finding(s) in custom resources")
        return 1
    if checked == 0:
        print("ERROR no custom resource was checked")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

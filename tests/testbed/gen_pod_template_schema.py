"""Generate the CRD schema of ``spec.template`` from the API server's own PodTemplateSpec.

Usage::

    python -m tests.testbed.gen_pod_template_schema            # start the testbed's API server
    python -m tests.testbed.gen_pod_template_schema --openapi api__v1_openapi.json
    python -m tests.testbed.gen_pod_template_schema --check    # exit 1 when crd.yaml is stale

Why: a RunnerGroup's template must be checked exactly as a Deployment's is, so a misspelt
field is refused by the API server with its own message, and nothing a user wrote is pruned.
The pinned Kubernetes (the testbed's kube-apiserver) serves that schema as OpenAPI v3 at
``/openapi/v3/api/v1``; a CRD needs a *structural* schema, so this converts it: ``$ref`` and
``allOf`` resolved inline, ``IntOrString`` and ``Quantity`` as ``x-kubernetes-int-or-string``,
free-form objects as ``x-kubernetes-preserve-unknown-fields``, keys a CRD cannot hold dropped
(descriptions too: they would triple the CRD's size), and list types kept only where a CRD
can enforce them. The result replaces the marked block of manifests/crd.yaml.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "manifests" / "crd.yaml"
OPENAPI_PATH = "/openapi/v3/api/v1"
BEGIN = "# BEGIN GENERATED spec.template"
END = "# END GENERATED spec.template"

_PREFIX = "#/components/schemas/"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_POD_SPEC = "io.k8s.api.core.v1.PodSpec"
# The same grammar as resource.Quantity's parser; controller-gen uses it for Quantity too.
_QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# Formats a CRD validates; others carry no check and are left out.
_FORMATS = frozenset({"int32", "int64", "byte", "date-time", "double", "float"})

OWNED_BY_OPERATOR = "is set by the operator"
# Owned fields that CEL checks cheaply (the rest: api/pod_template.py, as InvalidSpec). A rule
# over the runner container's env (containers x env, both unbounded in the real PodSpec) is
# estimated at more than 100x the CRD's CEL cost budget; bounding those lists would make the
# schema stricter than a Pod's, so that check stays with the operator.
TEMPLATE_RULES = [
    {
        "rule": "!has(self.spec) || !has(self.spec.restartPolicy)",
        "message": f"spec.template.spec.restartPolicy {OWNED_BY_OPERATOR} (OnFailure)",
    },
]
METADATA_MAP_RULE = (
    "self.all(k, !k.startsWith('gitea.bpg.pw/') && "
    "k != 'cluster-autoscaler.kubernetes.io/safe-to-evict' && k != 'karpenter.sh/do-not-disrupt')"
)


class Converter:
    """OpenAPI v3 component schemas -> structural CRD schemas."""

    def __init__(self, components: dict[str, Any]) -> None:
        self.components = components

    def convert(self, schema: dict[str, Any], stack: tuple[str, ...] = ()) -> dict[str, Any]:
        if "$ref" in schema:
            return self.ref(schema["$ref"], stack)
        all_of = schema.get("allOf")
        if all_of:
            if len(all_of) != 1 or "$ref" not in all_of[0]:
                raise ValueError(f"unsupported allOf: {all_of}")
            return self.ref(all_of[0]["$ref"], stack)
        if schema.get("format") == "int-or-string":
            return {"x-kubernetes-int-or-string": True}
        out: dict[str, Any] = {}
        kind = schema.get("type")
        if kind is None:
            raise ValueError(f"schema without a type: {sorted(schema)}")
        out["type"] = kind
        if schema.get("format") in _FORMATS:
            out["format"] = schema["format"]
        if kind == "object":
            props = schema.get("properties")
            extra = schema.get("additionalProperties")
            if props:
                out["properties"] = {
                    name: self.convert(sub, stack) for name, sub in sorted(props.items())
                }
                required = [r for r in schema.get("required", []) if r in props]
                if required:
                    out["required"] = required
            elif isinstance(extra, dict) and extra:
                out["additionalProperties"] = self.convert(extra, stack)
            else:
                # Free-form (e.g. an opaque options map): keep whatever the user wrote.
                out["x-kubernetes-preserve-unknown-fields"] = True
            if schema.get("x-kubernetes-map-type") in ("atomic", "granular"):
                out["x-kubernetes-map-type"] = schema["x-kubernetes-map-type"]
        elif kind == "array":
            out["items"] = self.convert(schema["items"], stack)
            list_type = self._list_type(schema, out["items"])
            if list_type:
                out.update(list_type)
        return out

    def ref(self, ref: str, stack: tuple[str, ...]) -> dict[str, Any]:
        name = ref.removeprefix(_PREFIX)
        if name == _QUANTITY:
            return {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": _QUANTITY_PATTERN,
                "x-kubernetes-int-or-string": True,
            }
        if name == _INT_OR_STRING:
            return {"x-kubernetes-int-or-string": True}
        if name in stack:
            # A recursive type cannot be inlined; keep it as the user wrote it.
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return self.convert(self.components[name], (*stack, name))

    @staticmethod
    def _list_type(schema: dict[str, Any], items: dict[str, Any]) -> dict[str, Any]:
        """A list type only where a CRD can enforce it: map keys must be required scalars."""
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            props = items.get("properties", {})
            required = set(items.get("required", []))
            if keys and all(k in required and "type" in props.get(k, {}) for k in keys):
                return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": keys}
            return {}
        if list_type == "set" and items.get("type") in ("string", "integer", "number"):
            return {"x-kubernetes-list-type": "set"}
        if list_type == "atomic":
            return {"x-kubernetes-list-type": "atomic"}
        return {}


def template_schema(openapi: dict[str, Any]) -> dict[str, Any]:
    """The ``spec.template`` schema: labels/annotations and a PodSpec whose containers are
    optional (the operator adds the runner)."""
    components = openapi["components"]["schemas"]
    pod_spec = Converter(components).convert(components[_POD_SPEC], (_POD_SPEC,))
    pod_spec.pop("required", None)
    string_map = {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "x-kubernetes-validations": [
            {
                "rule": METADATA_MAP_RULE,
                "message": (
                    "keys under gitea.bpg.pw/ and the node scale-down annotations "
                    "(safe-to-evict, do-not-disrupt) are set by the operator"
                ),
            }
        ],
    }
    return {
        "type": "object",
        "description": (
            "A Pod template (labels, annotations and a PodSpec) that runner Pods are built "
            "from; the container named runner is the runner. Fields the operator owns are "
            "refused: see the docs, Runner Pods."
        ),
        "x-kubernetes-validations": TEMPLATE_RULES,
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {"labels": string_map, "annotations": string_map},
            },
            "spec": pod_spec,
        },
    }


def render_block(schema: dict[str, Any], indent: int) -> str:
    """The YAML that goes between the markers, at the indentation of the BEGIN marker."""
    text = yaml.safe_dump({"template": schema}, sort_keys=False, width=100)
    pad = " " * indent
    return "".join(pad + line + "\n" for line in text.splitlines())


def splice(crd_text: str, schema: dict[str, Any]) -> str:
    lines = crd_text.splitlines(keepends=True)
    begin = next(i for i, line in enumerate(lines) if line.strip().startswith(BEGIN))
    end = next(i for i, line in enumerate(lines) if line.strip().startswith(END))
    indent = len(lines[begin]) - len(lines[begin].lstrip())
    return "".join(lines[: begin + 1]) + render_block(schema, indent) + "".join(lines[end:])


def generated_crd(openapi: dict[str, Any], crd_text: str | None = None) -> str:
    return splice(
        crd_text if crd_text is not None else CRD_FILE.read_text(), template_schema(openapi)
    )


def fetch_openapi() -> dict[str, Any]:
    """Start the testbed's API server (no Gitea, no nodes) and read its OpenAPI v3."""
    from .sandbox import Sandbox

    with Sandbox(kube="local", gitea=False, harness_node=False) as sandbox:
        assert sandbox.kube
        return dict(sandbox.kube.get(OPENAPI_PATH))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--openapi", type=Path, help="a saved /openapi/v3/api/v1 document")
    parser.add_argument("--check", action="store_true", help="exit 1 if crd.yaml is stale")
    args = parser.parse_args(argv)
    openapi = json.loads(args.openapi.read_text()) if args.openapi else fetch_openapi()
    current = CRD_FILE.read_text()
    wanted = generated_crd(openapi, current)
    if args.check:
        if wanted != current:
            print(f"{CRD_FILE} is stale: run python -m {__spec__.name}", file=sys.stderr)
            return 1
        return 0
    CRD_FILE.write_text(wanted)
    print(f"wrote {CRD_FILE} ({len(wanted.encode())} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

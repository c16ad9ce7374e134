"""The RunnerGroup reference, generated from the CRD's schema and descriptions.

The page `docs/reference/runnergroup.md` holds a marker line; MkDocs runs this file as a hook
(`hooks:` in mkdocs.yml) and replaces the marker with tables rendered from
`manifests/crd.yaml`, so the reference cannot drift from what the API server enforces.
`python docs/gen_reference.py` prints the generated part. Needs only PyYAML.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "manifests" / "crd.yaml"
PAGE = "reference/runnergroup.md"
MARKER = "<!-- GENERATED from manifests/crd.yaml by docs/gen_reference.py -->"
# Kubernetes' own PodTemplateSpec, converted from the API server's OpenAPI without descriptions:
# listed as one field, its inside documented by Kubernetes.
OPAQUE = {"spec.template"}


def load_version(path: Path = CRD) -> dict[str, Any]:
    """The CRD's single served version."""
    crd = yaml.safe_load(path.read_text())
    (version,) = crd["spec"]["versions"]
    return version


def fields(schema: dict[str, Any], prefix: str) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(path, schema, required) of every property below `schema`, depth first, in CRD order.
    Arrays of objects continue at `path[]`; maps (additionalProperties) and OPAQUE stop."""
    required = set(schema.get("required", []))
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}.{name}"
        yield path, sub, name in required
        if path in OPAQUE:
            continue
        if sub.get("type") == "object":
            yield from fields(sub, path)
        elif sub.get("type") == "array" and sub.get("items", {}).get("type") == "object":
            yield from fields(sub["items"], f"{path}[]")


def type_of(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {type_of(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {type_of(schema['additionalProperties'])}"
    if kind == "string" and schema.get("format"):
        return f"string ({schema['format']})"
    return kind


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True)
    text = text.strip().removesuffix("...").strip()
    return f"`{text}`"


def rules(schema: dict[str, Any]) -> list[str]:
    """What the API server enforces on this field, in words."""
    out = []
    if "enum" in schema:
        out.append("one of " + ", ".join(_code(v) for v in schema["enum"]))
    for low, high, what in (
        ("minimum", "maximum", ""),
        ("minLength", "maxLength", " characters"),
        ("minItems", "maxItems", " items"),
    ):
        if low in schema and high in schema:
            out.append(f"{schema[low]} to {schema[high]}{what}")
        elif low in schema:
            out.append(f"at least {schema[low]}{what}")
        elif high in schema:
            out.append(f"at most {schema[high]}{what}")
    if schema.get("x-kubernetes-list-type") == "set":
        out.append("no duplicates")
    if "pattern" in schema and not schema.get("x-kubernetes-int-or-string"):
        out.append(f"matches {_code(schema['pattern'])}")
    items = schema.get("items", {})
    if schema.get("type") == "array" and items.get("type") != "object":
        out += [f"each item: {r}" for r in rules(items)]
    out += [" ".join(v["message"].split()) for v in schema.get("x-kubernetes-validations", [])]
    return out


def _cell(text: str) -> str:
    """One table cell: one line; a pipe outside a code span escaped (inside one, Python-Markdown
    keeps it as it is)."""
    pieces = " ".join(text.split()).split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(pieces))


def table(schema: dict[str, Any], prefix: str) -> str:
    lines = [
        "| field | type | description, and what the API server enforces |",
        "|---|---|---|",
    ]
    for path, sub, required in fields(schema, prefix):
        description = " ".join(sub.get("description", "").split())
        checks = rules(sub)
        if checks:
            description += (" " if description else "") + "Enforced: " + "; ".join(checks) + "."
        kind = [type_of(sub)]
        if required:
            kind.append("**required**")
        if "default" in sub:
            kind.append(f"default {_code(sub['default'])}")
        lines.append(f"| `{path}` | {', '.join(kind)} | {_cell(description)} |")
    return "\n".join(lines)


def render(version: dict[str, Any] | None = None) -> str:
    """The generated part of the reference page."""
    version = version or load_version()
    root = version["schema"]["openAPIV3Schema"]
    spec, status = root["properties"]["spec"], root["properties"]["status"]
    parts = [
        f"_Generated from `manifests/crd.yaml` ({version['name']}) when the site is built._",
        "",
        "## Spec",
        "",
        " ".join(root.get("description", "").split()),
        "",
        "Rules across fields, checked by the API server on every create and update:",
        "",
    ]
    parts += [f"- {_cell(v['message'])}" for v in root.get("x-kubernetes-validations", [])]
    parts += [f"- {_cell(v['message'])}" for v in spec.get("x-kubernetes-validations", [])]
    parts += [
        "",
        table(spec, "spec"),
        "",
        "`spec.template` is a Kubernetes `PodTemplateSpec` (the schema of the Kubernetes version "
        "the CRD was generated for); its fields are Kubernetes' own: see "
        "[The Pod template](../runners.md#the-pod-template) for what the operator adds and "
        "refuses.",
        "",
        "## Status",
        "",
        "Written by the operator only.",
        "",
        table(status, "status"),
        "",
        "## `kubectl get runnergroups` (`rg`)",
        "",
        "| column | from |",
        "|---|---|",
    ]
    parts += [
        f"| {c['name']} | `{c['jsonPath']}` |" for c in version.get("additionalPrinterColumns", [])
    ]
    return "\n".join(parts) + "\n"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs hook: fill the reference page; a reference page without its marker fails."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its marker line {MARKER!r}")
    return markdown.replace(MARKER, render())


if __name__ == "__main__":
    sys.stdout.write(render())

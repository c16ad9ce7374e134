"""The docs site: the RunnerGroup reference is generated from the CRD and covers every field,
the site is built by tox (and so by CI) with --strict, and the README's test command is the one
CI runs."""

from __future__ import annotations

import configparser
import importlib.util
import re
from types import ModuleType
from typing import Any

import yaml

from tests.support import REPO_ROOT

ROOT = REPO_ROOT
DOCS = ROOT / "docs"


def gen_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def every_field(schema: dict[str, Any], prefix: str) -> list[tuple[str, dict[str, Any]]]:
    """Written apart from the generator on purpose: every property path, arrays of objects
    continuing at `path[]`; below spec.template only Kubernetes' own PodTemplateSpec."""
    out = []
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}.{name}"
        out.append((path, sub))
        if path == "spec.template":
            continue
        if "properties" in sub:
            out += every_field(sub, path)
        elif "properties" in sub.get("items", {}):
            out += every_field(sub["items"], f"{path}[]")
    return out


def rows(page: str) -> dict[str, str]:
    """Field path -> its table row."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([\w.\[\]]+)` \|.*$", page, re.M)}


def test_the_reference_has_a_row_for_every_field_of_the_spec_and_status():
    page = rows(gen_reference().render())
    root = crd_schema()["properties"]
    spec = every_field(root["spec"], "spec")
    status = every_field(root["status"], "status")
    assert len(spec) > 50  # spec.gitea.url, spec.cache.externalServer.secretRef.key, ...
    assert "status.conditions[].reason" in dict(status)
    missing = [path for path, _ in spec + status if path not in page]
    assert missing == []
    assert set(page) == {path for path, _ in spec + status}  # and nothing the CRD lacks


def test_each_row_carries_the_crds_description_default_and_rules():
    page = rows(gen_reference().render())
    for path, field in every_field(crd_schema()["properties"]["spec"], "spec"):
        row = page[path]
        if "description" in field:
            assert " ".join(field["description"].split()) in row, path
        if "default" in field:
            default = yaml.safe_dump(field["default"], default_flow_style=True)
            assert f"`{default.strip().removesuffix('...').strip()}`" in row, path
        for value in field.get("enum", []):
            assert f"`{value}`" in row, path
        for rule in field.get("x-kubernetes-validations", []):
            assert " ".join(rule["message"].split()) in row, path
    assert "spec.scope is immutable" in page["spec.scope"]


def test_the_reference_page_is_filled_by_the_hook_at_build_time():
    gen = gen_reference()
    page = (DOCS / gen.PAGE).read_text()
    assert page.count(gen.MARKER) == 1

    class File:
        src_uri = gen.PAGE

    class Page:
        file = File()

    built = gen.on_page_markdown(page, page=Page(), config=None, files=None)
    assert gen.MARKER not in built
    assert "| `spec.maxActiveRunners` | integer, **required** |" in built
    mkdocs = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert "docs/gen_reference.py" in mkdocs["hooks"]


def test_tox_builds_the_site_strictly_in_the_default_run():
    tox = configparser.ConfigParser()
    tox.read(ROOT / "tox.ini")
    assert "docs" in [e.strip() for e in tox["tox"]["env_list"].split(",")]
    assert "mkdocs build --strict" in tox["testenv:docs"]["commands"]
    mkdocs = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert mkdocs["theme"]["name"] == "material"
    assert all(level == "warn" for level in mkdocs["validation"].values())


def test_ci_runs_exactly_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text()
    command = "python3 -m pip install --quiet 'tox>=4' && python3 -m tox"
    assert f"```sh\n{command}\n```" in readme
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == command


def test_the_readme_is_short_and_links_only_to_pages_that_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 160
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links
    assert sorted(link for link in set(links) if not (ROOT / link).is_file()) == []


def test_the_readmes_first_group_is_a_valid_runnergroup_with_its_secret_and_role():
    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "RunnerGroup" in b)
    docs = {d["kind"]: d for d in yaml.safe_load_all(block)}
    assert set(docs) == {"Namespace", "Secret", "Role", "RoleBinding", "RunnerGroup"}
    spec_schema = crd_schema()["properties"]["spec"]
    group = docs["RunnerGroup"]
    assert set(spec_schema["required"]) <= set(group["spec"])
    assert set(group["spec"]) <= set(spec_schema["properties"])
    secret = docs["Secret"]
    assert secret["metadata"]["labels"] == {"gitea.bpg.pw/credentials": "true"}
    for ref in (group["spec"]["registrationToken"], group["spec"]["authToken"]):
        assert ref["secretRef"]["name"] == secret["metadata"]["name"]
        assert ref["secretRef"]["key"] in secret["stringData"]
    (rule,) = docs["Role"]["rules"]
    assert rule["resourceNames"] == [secret["metadata"]["name"]] and rule["verbs"] == ["get"]
    namespace = docs["Namespace"]["metadata"]["name"]
    assert {d["metadata"]["namespace"] for k, d in docs.items() if k != "Namespace"} == {namespace}

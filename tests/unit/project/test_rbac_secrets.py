"""The operator can never enumerate, change or delete Secrets: no Role or ClusterRole in
manifests/ grants it more than ``get`` (a read names the Secret; list and watch would show them
all) and ``create`` (a Forgejo runner's own credentials, in a Secret owned by its runner Job and
garbage-collected with it). The one exception is the opt-in ``-cache`` ClusterRole, bound by a
team in its own namespace only, which also keeps (patch, delete) the group's cache Secret."""

from __future__ import annotations

import yaml

from tests.support import REPO_ROOT

ROOT = REPO_ROOT


def test_no_manifest_grants_more_than_get_and_create_on_secrets():
    checked = 0
    for path in sorted((ROOT / "manifests").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in ("Role", "ClusterRole"):
                continue
            for rule in doc.get("rules") or []:
                if "secrets" in (rule.get("resources") or []) or "*" in (
                    rule.get("resources") or []
                ):
                    checked += 1
                    allowed = {"get", "create"}
                    if doc["metadata"]["name"].endswith("-cache"):
                        allowed |= {"patch", "delete"}
                    assert "list" not in (rule.get("verbs") or []), (path, rule)
                    assert set(rule.get("verbs") or []) <= allowed, (path, rule)
    assert checked >= 1  # the -secrets ClusterRole is there and was looked at

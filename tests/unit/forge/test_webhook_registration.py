import pytest

from gitea_runner_operator.api.gitea import OwnerKind
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.hooks import hook_body, hooks_for, hooks_path
from gitea_runner_operator.forge.scope import ScopeRef


@pytest.mark.parametrize(
    ("scope", "path"),
    [
        (ScopeRef(Scope.GLOBAL), "/api/v1/admin/hooks"),
        (ScopeRef(Scope.ORG, org="acme"), "/api/v1/orgs/acme/hooks"),
        (ScopeRef(Scope.REPO, org="acme", repo="w.x"), "/api/v1/repos/acme/w.x/hooks"),
        # An "organisation" that is the token's own user: that user's hooks.
        (ScopeRef(Scope.ORG, org="alice", owner_kind=OwnerKind.USER), "/api/v1/user/hooks"),
    ],
)
def test_hook_paths(scope, path):
    assert hooks_path(scope) == path


def test_the_wanted_hook_delivers_only_workflow_job_as_json():
    body = hook_body(ScopeRef(Scope.ORG, org="acme"), "https://op/hooks/gitea", "s")
    assert body["type"] == "gitea"
    assert body["events"] == ["workflow_job"]
    assert body["config"] == {
        "url": "https://op/hooks/gitea",
        "content_type": "json",
        "secret": "s",
    }
    assert "is_system_webhook" not in body
    assert hook_body(ScopeRef(Scope.GLOBAL), "u", "s")["is_system_webhook"] is True


def test_our_hooks_are_found_by_target_url():
    listed = [
        {"id": 1, "config": {"url": "https://op/hooks/gitea"}},
        {"id": 2, "config": {"url": "https://elsewhere/"}},
        {"id": 3, "config": {"url": "https://op/hooks/gitea"}},
        {"id": "4", "config": {"url": "https://op/hooks/gitea"}},
        "junk",
    ]
    assert hooks_for(listed, "https://op/hooks/gitea") == [1, 3]

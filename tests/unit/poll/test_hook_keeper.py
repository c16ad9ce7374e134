"""The group's own hook (spec.webhook.manageHook), kept from its poll task: made once, left
alone while fresh, replaced when the secret changes, removed on request, and every failure a
clear condition. Gitea's hooks API is played by a fake; the integration suite runs the same
code against a real Gitea."""

from __future__ import annotations

from typing import Any

from gitea_runner_operator.api.observation import Problem
from gitea_runner_operator.api.runnergroup import Scope, parse_spec
from gitea_runner_operator.forge.errors import GiteaForbidden
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kube.secrets import SecretProblem
from gitea_runner_operator.poll.hooks import HookKeeper
from gitea_runner_operator.poll.observer import GiteaHandle
from tests.support.builders import VALID

KEY = "team-a/ci"
DELIVERY = "http://op.example/hooks/gitea"
SPEC = parse_spec(
    {**VALID, "webhook": {"secretRef": {"name": "hook", "key": "secret"}, "manageHook": True}}
)


class FakeHooksAPI:
    """Gitea's hook endpoints of one repository."""

    def __init__(self) -> None:
        self.hooks: dict[int, dict[str, Any]] = {}
        self.next_id = 1
        self.calls: list[str] = []
        self.forbidden = False

    async def call(self, method: str, path: str, params: Any = None, body: Any = None) -> Any:
        self.calls.append(method)
        if self.forbidden:
            raise GiteaForbidden(f"{method} {path}: 403")
        if method == "GET":
            return list(self.hooks.values())
        if method == "POST":
            hook = {"id": self.next_id, **body}
            self.hooks[self.next_id] = hook
            self.next_id += 1
            return hook
        hook_id = int(path.rsplit("/", 1)[1])
        if method == "DELETE":
            self.hooks.pop(hook_id, None)
            return None
        self.hooks[hook_id].update(body)  # PATCH
        return self.hooks[hook_id]


class FakeSecrets:
    def __init__(self, value: str | None) -> None:
        self.value = value

    async def read(self, namespace: str, name: str, key: str, field: str, url: str) -> str:
        if self.value is None:
            problem = Problem("SecretNotFound", f"{field}: Secret {namespace}/{name} not found")
            raise SecretProblem(problem)
        return self.value


def keeper(secret: str | None = "s1", url: str | None = DELIVERY) -> tuple[HookKeeper, list[float]]:  # noqa: S107
    now = [0.0]
    return HookKeeper(FakeSecrets(secret), url, clock=lambda: now[0]), now  # type: ignore[arg-type]


def handle(api: FakeHooksAPI) -> GiteaHandle:
    class Client:
        call = api.call

    return GiteaHandle(Client(), ScopeRef(Scope.REPO, "acme", "widgets"))  # type: ignore[arg-type]


async def test_the_hook_is_made_once_per_group_then_left_alone_while_fresh():
    api = FakeHooksAPI()
    hooks, now = keeper()
    status = await hooks.keep(KEY, SPEC, handle(api))
    assert status is not None and status.ok and status.reason == "HookRegistered"
    (hook,) = api.hooks.values()
    assert hook["events"] == ["workflow_job"]
    assert hook["config"]["url"] == f"{DELIVERY}?group=team-a%2Fci"  # one hook per group
    assert hook["config"]["secret"] == "s1"
    calls = len(api.calls)
    now[0] = 60.0
    assert await hooks.keep(KEY, SPEC, handle(api)) is None
    assert len(api.calls) == calls  # nothing sent while fresh
    now[0] = 700.0
    again = await hooks.keep(KEY, SPEC, handle(api))
    assert again is not None and again.ok and list(api.hooks) == [1]  # checked, kept


async def test_a_hook_already_as_wanted_is_kept_by_one_request_and_a_changed_one_edited():
    api = FakeHooksAPI()
    hooks, now = keeper()
    await hooks.keep(KEY, SPEC, handle(api))
    api.calls.clear()
    now[0] = 700.0
    assert (await hooks.keep(KEY, SPEC, handle(api))).ok  # type: ignore[union-attr]
    assert api.calls == ["GET"]  # listed, found as wanted: no edit
    api.hooks[1]["active"] = False  # someone turned it off in Gitea's settings
    now[0] = 1400.0
    await hooks.keep(KEY, SPEC, handle(api))
    assert api.calls == ["GET", "GET", "PATCH"] and api.hooks[1]["active"] is True


async def test_a_new_secret_replaces_the_hook_because_gitea_cannot_change_one():
    api = FakeHooksAPI()
    hooks, _ = keeper()
    await hooks.keep(KEY, SPEC, handle(api))
    hooks._secrets.value = "s2"  # type: ignore[attr-defined]
    status = await hooks.keep(KEY, SPEC, handle(api))
    assert status is not None and status.ok
    (hook,) = api.hooks.values()
    assert hook["id"] == 2 and hook["config"]["secret"] == "s2"


async def test_remove_deletes_only_this_groups_hook():
    api = FakeHooksAPI()
    hooks, _ = keeper()
    await hooks.keep(KEY, SPEC, handle(api))
    await hooks.keep("team-b/ci", SPEC, handle(api))
    assert len(api.hooks) == 2
    assert await hooks.remove(KEY, handle(api)) is True
    (left,) = api.hooks.values()
    assert left["config"]["url"].endswith("group=team-b%2Fci")
    assert not hooks.holds(KEY) and hooks.holds("team-b/ci")


async def test_a_restarted_operator_still_removes_the_hook_of_a_deleted_group():
    api = FakeHooksAPI()
    first, _ = keeper()
    await first.keep(KEY, SPEC, handle(api))
    restarted, _ = keeper()
    assert await restarted.remove(KEY, handle(api)) is True
    assert api.hooks == {}


async def test_failures_become_clear_conditions():
    api = FakeHooksAPI()
    api.forbidden = True
    hooks, _ = keeper()
    status = await hooks.keep(KEY, SPEC, handle(api))
    assert status is not None and (status.ok, status.reason) == (False, "HookNotPermitted")
    assert "spec.authToken" in status.message

    no_url, _ = keeper(url=None)
    status = await no_url.keep(KEY, SPEC, handle(FakeHooksAPI()))
    assert status is not None and status.reason == "WebhookURLNotSet"
    assert "--webhook-url" in status.message

    no_secret, _ = keeper(secret=None)
    status = await no_secret.keep(KEY, SPEC, handle(FakeHooksAPI()))
    assert status is not None and status.reason == "SecretNotFound"
    assert "spec.webhook.secretRef" in status.message


async def test_a_group_that_does_not_manage_its_hook_sends_nothing():
    api = FakeHooksAPI()
    hooks, _ = keeper()
    plain = parse_spec({**VALID, "webhook": {"secretRef": {"name": "hook", "key": "secret"}}})
    assert await hooks.keep(KEY, plain, handle(api)) is None
    assert api.calls == []

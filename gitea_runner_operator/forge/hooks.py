"""Register (and remove) the operator's ``workflow_job`` hook in Gitea, for groups whose API token
may manage hooks (an organisation owner's for an org hook, a repository admin's for a repo hook,
a site admin's for a system hook).

Idempotent by target URL: :meth:`HookClient.ensure_hook` finds the scope's hook that delivers
to ``url`` and brings it to the wanted shape (events, content type, active), or creates one;
:meth:`HookClient.remove_hook` deletes every hook of the scope that delivers to ``url``.
Nothing here retries: a caller that reconciles calls again on its next pass. The secret travels
only in the request body and is never logged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.errors import GiteaError, GiteaNotFound, GiteaProtocolError
from gitea_runner_operator.forge.limits import check_page
from gitea_runner_operator.forge.scope import ScopeRef

EVENTS: Final = ("workflow_job",)
_PAGE: Final = 50
_MAX_PAGES: Final = 20


def hooks_path(scope: ScopeRef) -> str:
    """Where a scope's hooks live: ``/admin/hooks`` (system hooks) for the instance, else
    beside the scope's Actions API (an organisation's, a user's own, a repository's)."""
    return f"{scope.prefix}/hooks"


@dataclass(frozen=True, slots=True)
class HookState:
    id: int
    created: bool


def hook_body(scope: ScopeRef, url: str, secret: str) -> dict[str, Any]:
    """The wanted hook, as Gitea's create/edit endpoints take it."""
    body: dict[str, Any] = {
        "type": "gitea",
        "active": True,
        "events": list(EVENTS),
        "branch_filter": "*",
        "config": {"url": url, "content_type": "json", "secret": secret},
    }
    if scope.scope is Scope.GLOBAL:
        body["is_system_webhook"] = True
    return body


def hooks_for(hooks: list[Any], url: str) -> list[int]:
    """Ids of the listed hooks that deliver to ``url`` (ours, by construction)."""
    return [hook["id"] for hook in _delivering_to(hooks, url)]


def in_shape(hook: Any) -> bool:
    """Whether a listed hook is already the wanted one (active, our events only, JSON, every
    branch): then keeping it sends no edit. Gitea shows no secret, so the secret is the
    caller's business (``rotate``)."""
    config = hook.get("config") if isinstance(hook, dict) else None
    return (
        isinstance(config, dict)
        and hook.get("active") is True
        and sorted(hook.get("events") or ()) == sorted(EVENTS)
        and config.get("content_type") == "json"
        and hook.get("branch_filter", "*") in ("*", "")
    )


def _delivering_to(hooks: list[Any], url: str) -> list[dict[str, Any]]:
    out = []
    for hook in hooks:
        if not isinstance(hook, dict):
            continue
        config = hook.get("config")
        if (
            isinstance(config, dict)
            and config.get("url") == url
            and isinstance(hook.get("id"), int)
        ):
            out.append(hook)
    return out


# A request to Gitea with the group's token: GiteaClient.call, which never follows a
# redirect, retries what is transient and maps statuses to GiteaError subclasses.
Call = Callable[[str, str, Mapping[str, str] | None, Any], Awaitable[Any]]


class HookClient:
    def __init__(self, call: Call) -> None:
        self._call_gitea = call

    async def _call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        query = {k: str(v) for k, v in params.items()} or None
        return await self._call_gitea(method, path, query, body)

    async def list_hooks(self, scope: ScopeRef) -> list[Any]:
        hooks: list[Any] = []
        for page in range(1, _MAX_PAGES + 1):
            batch = await self._call("GET", hooks_path(scope), page=page, limit=_PAGE)
            if not isinstance(batch, list):
                raise GiteaProtocolError(f"GET {hooks_path(scope)}: expected a list of hooks")
            check_page(len(batch), _PAGE, f"GET {hooks_path(scope)} page {page}")
            hooks += batch
            if len(batch) < _PAGE:
                break
        return hooks

    async def ensure_hook(
        self, scope: ScopeRef, url: str, secret: str, *, rotate: bool = False
    ) -> HookState:
        """The scope's hook to ``url``, edited to the wanted shape, or a new one; extra hooks to
        the same URL are deleted.

        Gitea never returns a hook's secret, and its edit endpoint ignores ``config.secret``
        (checked in 1.26.4, ``routers/api/v1/utils/hook.go``, ``editHook``). So an existing
        hook keeps the secret it was made with, and ``rotate=True`` (the caller knows the
        secret changed) replaces it: the new hook is created before the old one is deleted, so
        no delivery falls between them."""
        if not secret:
            raise GiteaError("a webhook needs a non-empty secret")
        body = hook_body(scope, url, secret)
        listed = _delivering_to(await self.list_hooks(scope), url)
        existing = [hook["id"] for hook in listed]
        if not existing or rotate:
            made = await self._call("POST", hooks_path(scope), body)
            if not isinstance(made, dict) or not isinstance(made.get("id"), int):
                raise GiteaProtocolError(f"POST {hooks_path(scope)}: the answer has no hook id")
            for hook_id in existing:
                with contextlib.suppress(GiteaNotFound):
                    await self._call("DELETE", f"{hooks_path(scope)}/{hook_id}")
            return HookState(made["id"], created=True)
        first, *extra = existing
        if not in_shape(listed[0]):  # a hook as wanted costs its keep one request, the list
            edit = {k: v for k, v in body.items() if k not in ("type", "is_system_webhook")}
            await self._call("PATCH", f"{hooks_path(scope)}/{first}", edit)
        for hook_id in extra:
            with contextlib.suppress(GiteaNotFound):
                await self._call("DELETE", f"{hooks_path(scope)}/{hook_id}")
        return HookState(first, created=False)

    async def remove_hook(self, scope: ScopeRef, url: str) -> int:
        """Delete the scope's hooks to ``url``; how many there were. A scope that is gone
        (404) has no hooks left to remove."""
        try:
            existing = hooks_for(await self.list_hooks(scope), url)
        except GiteaNotFound:
            return 0
        for hook_id in existing:
            with contextlib.suppress(GiteaNotFound):
                await self._call("DELETE", f"{hooks_path(scope)}/{hook_id}")
        return len(existing)

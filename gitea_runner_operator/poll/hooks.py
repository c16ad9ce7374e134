"""Keeps a group's own Gitea hook (``spec.webhook.manageHook``), from the group's poll task.

The poll task is the only place that talks to the group's Gitea, so the hook is kept there
too: after an observation that worked (the token and URL are good), at most every
``KEEP_EVERY`` seconds, and at once when the group's webhook secret changed. Gitea never
shows a hook's secret and its edit endpoint ignores a new one, so the first keep of a hook
by this process, and every secret change, replaces the hook (create, then delete the old
one: no delivery falls between). Deleting the group removes the hook (teardown); turning
``manageHook`` off removes it too.

Failures here never touch the group's runners: they become the ``Webhook`` condition, and
polling (the source of truth) goes on.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from gitea_runner_operator.api.hooks import HookStatus, hook_url
from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.forge.errors import GiteaError, GiteaForbidden, GiteaUnauthorized
from gitea_runner_operator.forge.hooks import HookClient
from gitea_runner_operator.forge.observe import GiteaHandle
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kube.secrets import SecretProblem, Secrets

log = structlog.get_logger(__name__)

KEEP_EVERY = 600.0

NO_URL = HookStatus(
    False,
    "WebhookURLNotSet",
    "spec.webhook.manageHook needs the operator's --webhook-url (where Gitea delivers "
    "webhooks); ask the platform team to set it, or add the hook in Gitea by hand",
)


@dataclass(slots=True)
class _Kept:
    url: str
    scope: ScopeRef
    fingerprint: str
    at: float
    hook_id: int


class HookKeeper:
    def __init__(
        self,
        secrets: Secrets,
        delivery_url: str | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secrets = secrets
        self._delivery_url = delivery_url
        self._clock = clock
        self._kept: dict[str, _Kept] = {}  # group key -> the hook this process made

    def holds(self, key: str) -> bool:
        """Whether this process made a hook for the group that it has not removed."""
        return key in self._kept

    async def keep(self, key: str, spec: RunnerGroupSpec, handle: GiteaHandle) -> HookStatus | None:
        """Bring the group's hook to the wanted shape; None when nothing was due."""
        if spec.webhook is None or not spec.manages_hook:
            return None
        if not self._delivery_url:
            return NO_URL
        ref = spec.webhook.secret_ref
        namespace = GroupKey.parse(key).namespace
        try:
            secret = await self._secrets.read(
                namespace, ref.name, ref.key, "spec.webhook.secretRef", spec.gitea.url
            )
        except SecretProblem as exc:
            return HookStatus(False, exc.problem.reason, exc.problem.message)
        url = hook_url(self._delivery_url, key)
        scope = handle.scope  # resolved: a user-owned "organisation" has its hooks at /user
        fingerprint = hashlib.sha256(secret.encode()).hexdigest()
        kept = self._kept.get(key)
        fresh = (
            kept is not None
            and kept.url == url
            and kept.scope == scope
            and kept.fingerprint == fingerprint
            and self._clock() - kept.at < KEEP_EVERY
        )
        if fresh and kept is not None:
            return None
        if kept is not None and (kept.url != url or kept.scope != scope):
            await self.remove(key, handle)  # moved: the old scope's hook goes
            kept = None
        rotate = kept is None or kept.fingerprint != fingerprint
        client = HookClient(handle.client.call)
        try:
            state = await client.ensure_hook(scope, url, secret, rotate=rotate)
        except GiteaForbidden:
            return HookStatus(
                False,
                "HookNotPermitted",
                f"the API token (spec.authToken) may not manage the hooks of {_where(scope)}",
            )
        except GiteaUnauthorized:
            return HookStatus(
                False, "HookNotPermitted", "the API token (spec.authToken) was refused"
            )
        except GiteaError as exc:
            return HookStatus(False, "HookFailed", f"keeping the hook of {_where(scope)}: {exc}")
        self._kept[key] = _Kept(url, scope, fingerprint, self._clock(), state.id)
        if state.created:
            log.info("webhook created in gitea", group=key, hook_id=state.id, scope=_where(scope))
        return HookStatus(
            True, "HookRegistered", f"hook {state.id} of {_where(scope)} delivers to {url}"
        )

    async def remove(self, key: str, handle: GiteaHandle) -> bool:
        """Delete the group's hooks (in the scope this process kept it in, else in the
        group's scope: a restarted operator still removes them); True once none is left."""
        kept = self._kept.get(key)
        if kept is not None:
            url, scope = kept.url, kept.scope
        elif self._delivery_url:
            url, scope = hook_url(self._delivery_url, key), handle.scope
        else:
            return True  # no delivery URL: the operator never made a hook
        try:
            removed = await HookClient(handle.client.call).remove_hook(scope, url)
        except GiteaError as exc:
            log.warning("webhook removal postponed", group=key, error=str(exc))
            return False
        self._kept.pop(key, None)
        if removed:
            log.info("webhook removed from gitea", group=key, scope=_where(scope))
        return True

    def kept_id(self, key: str) -> int | None:
        kept = self._kept.get(key)
        return kept.hook_id if kept is not None else None

    def forget(self, key: str) -> None:
        self._kept.pop(key, None)

    def knows(self, key: str) -> bool:
        return key in self._kept


def _where(scope: ScopeRef) -> str:
    if scope.repo:
        return f"repository {scope.org}/{scope.repo}"
    if scope.org:
        return f"organisation {scope.org}"
    return "the instance (system hook)"

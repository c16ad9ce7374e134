"""The webhook receiver's one port (webhook/ports.Operator), implemented once, over
whichever controller acts now. A standby replica has none: it knows no groups and answers
503, and polling on the leader still finds the job."""

from __future__ import annotations

from collections.abc import Sequence

from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.runtime.leadership import Leadership
from gitea_runner_operator.sharding.forwards import Split
from gitea_runner_operator.webhook.descriptors import Descriptors
from gitea_runner_operator.webhook.routing import GroupDescriptor, SecretLocation
from gitea_runner_operator.webhook.secrets import CachedSecretReader


class OperatorPort:
    """``secrets``: a cached reader of the groups' hook secrets (one GET per TTL)."""

    def __init__(
        self, leadership: Leadership, secrets: CachedSecretReader, metrics: Metrics
    ) -> None:
        self._leadership = leadership
        self._secrets = secrets
        self._metrics = metrics
        self._descriptors = Descriptors()

    def active(self) -> bool:
        return self._leadership.controller is not None

    def groups(self) -> list[GroupDescriptor]:
        current = self._leadership.controller
        if current is None:
            return []
        cache = current.cache
        return self._descriptors.since(
            cache,
            cache.group_changes,
            lambda: (obj for key in cache.group_keys() if (obj := cache.group(key))),
        )

    async def secret(self, where: SecretLocation) -> bytes | None:
        return await self._secrets(where)

    def secret_at_hand(self, where: SecretLocation) -> bytes | None:
        return self._secrets.at_hand(where)

    def split(self, keys: Sequence[str]) -> Split:
        """Who serves each group (the share, sharding/leases/share.py); all here without
        ``--sharding`` or without a controller."""
        current = self._leadership.controller
        if current is None or current.share is None:
            return Split(tuple(keys))
        return current.share.split(keys)

    def wake(self, key: str) -> None:
        current = self._leadership.controller
        if current is not None:
            current.wake(key)

    def heard(self, key: str, job_id: int | None) -> None:
        current = self._leadership.controller
        if current is not None:
            current.heard(key, job_id)

    def knows(self, key: str, job_id: int) -> bool:
        current = self._leadership.controller
        return current is not None and current.knows(key, job_id)

    def asking(self, key: str) -> bool:
        current = self._leadership.controller
        poller = current.pollers.get(key) if current is not None else None
        return poller is not None and poller.asking

    def delivered(self, outcome: str) -> None:
        self._metrics.webhook_delivery(outcome)

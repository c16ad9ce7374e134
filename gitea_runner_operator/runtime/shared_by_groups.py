"""What groups share, and when a group leaves, what no group left uses: the register of
per-group memory (kit/group_memory.py) calls it like any other holder."""

from __future__ import annotations

import asyncio

from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.forge.sessions import SessionPool
from gitea_runner_operator.kit.tasks import finish_or_cancel
from gitea_runner_operator.kube.secrets import Secrets
from gitea_runner_operator.poll.observer import Observer
from gitea_runner_operator.poll.pollers import Pollers


class SharedByGroups:
    """What groups share, kept by namespace (cached Secrets) and by Gitea URL (fetches and
    HTTP sessions), never by group, so it knows no group key. As a holder of per-group
    memory, it drops what no group left uses once a group is gone."""

    def __init__(
        self, pollers: Pollers, secrets: Secrets, observer: Observer, sessions: SessionPool
    ) -> None:
        self._pollers, self._secrets = pollers, secrets
        self._observer, self._sessions = observer, sessions
        self._tasks: set[asyncio.Task[None]] = set()

    def forget(self, key: str) -> None:
        urls = {spec.gitea.url for spec in self._pollers.specs()}
        namespaces = {GroupKey.parse(k).namespace for k in self._pollers.keys()}  # noqa: SIM118
        self._secrets.retain(namespaces)
        task = asyncio.create_task(self._drop_urls(urls))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def knows(self, key: str) -> bool:
        return False

    async def _drop_urls(self, urls: set[str]) -> None:
        """Fetches of URLs no group uses are cancelled and awaited before their sessions
        close: a request left running would fail later on a closed session, unobserved."""
        await self._observer.drop(urls)
        await self._sessions.retain(urls)

    async def close(self) -> None:
        await finish_or_cancel(list(self._tasks))

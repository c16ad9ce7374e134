"""The webhook receiver's one port (webhook/ports.Operator), implemented once, over
whichever controller acts now. A standby replica has none: it knows no groups and answers
503, and polling on the leader still finds the job.

The receiver runs on a thread and event loop of its own (runtime/receiver_thread.py), so the
port is where the two threads meet; ``main`` is the controller's loop. What the port tells
the controller (a wake, a delivery heard) is handed to that loop and never waited for. What
it asks is read where no other thread can change it halfway (the groups' objects copied in
one step, a poller's last answer, which is never changed after it is made), or, for the
replicas' split under ``--sharding``, asked of that loop and awaited, ``SPLIT_WAIT`` at most
(the receiver's loop serves other deliveries meanwhile). The hook secrets are the receiver's
own cache, read through the controller's loop. Without ``main`` (tests), every call is made
in place."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.runtime.leadership import Leadership
from gitea_runner_operator.sharding.forwards import Split
from gitea_runner_operator.webhook.descriptors import Descriptors
from gitea_runner_operator.webhook.routing import GroupDescriptor, SecretLocation
from gitea_runner_operator.webhook.secrets import CachedSecretReader

T = TypeVar("T")

# How long a delivery waits for the controller's loop to say which replica serves its groups;
# past it, the dispatcher wakes them all here (webhook/dispatch.py).
SPLIT_WAIT: Final = 1.0
# Deliveries' evidence (``heard``) handed to the controller's loop and not yet taken: a
# tenant's flood of deliveries signed with its own secret, while that loop is held (a
# collection, a long pass), queues no more than this; past it the evidence is dropped, which
# at worst keeps a group's poll at its shorter interval a while. Wakes are never dropped:
# the receiver paces them per group (webhook/wakes.py), so they are bounded already.
HANDED_AT_MOST: Final = 4096


class OperatorPort:
    """``secrets``: a cached reader of the groups' hook secrets (one GET per TTL), used by the
    receiver alone; ``main``: the controller's loop, when the receiver runs on another
    thread."""

    def __init__(
        self,
        leadership: Leadership,
        secrets: CachedSecretReader,
        metrics: Metrics,
        main: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._leadership = leadership
        self._secrets = secrets
        self._metrics = metrics
        self._main = main
        self._descriptors = Descriptors()
        # Evidence handed over and taken: each count written by one thread only.
        self._handed = 0
        self._taken = 0

    def _tell(self, call: Callable[[], None]) -> None:
        """Have the controller's loop make ``call``; never waits for it."""
        if self._main is None:
            call()
        else:
            self._main.call_soon_threadsafe(call)

    def _tell_evidence(self, call: Callable[[], None]) -> None:
        """:meth:`_tell`, unless ``HANDED_AT_MOST`` are still to be taken (then dropped)."""
        if self._main is None:
            call()
            return
        if self._handed - self._taken >= HANDED_AT_MOST:
            return

        def take() -> None:
            self._taken += 1
            call()

        self._handed += 1
        self._main.call_soon_threadsafe(take)

    async def _ask(self, call: Callable[[], T]) -> T:
        """What ``call`` answers on the controller's loop, awaited ``SPLIT_WAIT`` at most
        (the receiver's loop goes on meanwhile); past it, ``call`` is never made. (Not
        ``run_coroutine_threadsafe``: given up, it cancels its task one hop later, after
        that task has already made the call.)"""
        if self._main is None:
            return call()
        answer: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if answer.set_running_or_notify_cancel():
                try:
                    answer.set_result(call())
                except Exception as exc:
                    answer.set_exception(exc)

        self._main.call_soon_threadsafe(run)
        try:
            async with asyncio.timeout(SPLIT_WAIT):
                return await asyncio.wrap_future(answer)
        finally:
            answer.cancel()  # not yet run: never run

    def active(self) -> bool:
        return self._leadership.controller is not None

    def groups(self) -> list[GroupDescriptor]:
        current = self._leadership.controller
        if current is None:
            return []
        cache = current.cache
        return self._descriptors.since(cache, cache.group_changes, cache.group_objects)

    async def secret(self, where: SecretLocation) -> bytes | None:
        return await self._secrets(where)

    def secret_at_hand(self, where: SecretLocation) -> bytes | None:
        return self._secrets.at_hand(where)

    async def split(self, keys: Sequence[str]) -> Split:
        """Who serves each group (the share, sharding/leases/share.py); all here without
        ``--sharding`` or without a controller."""
        current = self._leadership.controller
        if current is None or current.share is None:
            return Split(tuple(keys))
        share = current.share
        return await self._ask(lambda: share.split(keys))

    def wake(self, key: str) -> None:
        def wake() -> None:
            current = self._leadership.controller
            if current is not None:
                current.wake(key)

        self._tell(wake)

    def heard(self, key: str, job_id: int | None) -> None:
        def heard() -> None:
            current = self._leadership.controller
            if current is not None:
                current.heard(key, job_id)

        self._tell_evidence(heard)

    def knows(self, key: str, job_id: int) -> bool:
        current = self._leadership.controller
        return current is not None and current.knows(key, job_id)

    def asking(self, key: str) -> bool:
        current = self._leadership.controller
        poller = current.pollers.get(key) if current is not None else None
        return poller is not None and poller.asking

    def delivered(self, outcome: str) -> None:
        self._metrics.webhook_delivery(outcome)

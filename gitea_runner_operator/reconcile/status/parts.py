"""What the steps of a pass and the group's poll task hand to the pass, which writes the
group's whole status once (reconcile/steps/status_write.py). Each part of the status has one
author, but one writer: two writers of one object's status raced each other's merge patches
and each spent its own write token and watch event.

- ``status.cache``: the ``spec.cache`` step keeps the latest it found (:func:`cache_part`).
- ``status.losses``: the losses step and the poll task's follow-up note records in
  :class:`PendingLosses`; both read the group through it, so a record noted and not yet
  written counts as written (a loss is never recorded twice, a follow-up never goes back).
- ``status.waiting``: computed by the writer itself (reconcile/why/waiting.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitea_runner_operator.api.loss import LOSSES

CACHE = "cache"  # the field of the RunnerGroup's status


@dataclass(frozen=True, slots=True)
class Part:
    """Fields of ``status`` (merge-patch values: None removes) and the Warning Events that
    mark their transitions, sent only once the status carrying them is written."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    events: tuple[tuple[str, str], ...] = ()

    def __add__(self, other: Part) -> Part:
        return Part({**self.fields, **other.fields}, (*self.events, *other.events))


NOTHING = Part()


def cache_part(previous: Mapping[str, Any], cache: dict[str, Any] | None) -> Part:
    """``status.cache`` as the cache step last found it (None: no cache, the field goes),
    with a Warning when it turns bad for a new reason (a starting server is no warning)."""
    before = previous.get(CACHE)
    if before == cache:
        return Part({CACHE: cache})
    if cache is None or cache.get("ready"):
        return Part({CACHE: cache})
    reason = cache.get("reason")
    if reason == "CacheServerStarting" or reason == (before or {}).get("reason"):
        return Part({CACHE: cache})
    return Part({CACHE: cache}, ((str(reason), str(cache.get("message"))),))


class PendingLosses:
    """Loss records noted by the losses step or the poll task and not yet shown by the
    cluster: runner Job name -> the encoded record (None: the record is removed)."""

    def __init__(self) -> None:
        self._pending: dict[str, dict[str, str | None]] = {}

    def note(self, key: str, records: Mapping[str, str | None]) -> None:
        if records:
            self._pending.setdefault(key, {}).update(records)

    def view(self, key: str, group: dict[str, Any]) -> dict[str, Any]:
        """The group as it reads once the noted records are written."""
        pending = self._shown(key, group)
        if not pending:
            return group
        status = group.get("status") or {}
        merged = {j: v for j, v in {**_stored(group), **pending}.items() if v is not None}
        return {**group, "status": {**status, LOSSES: merged}}

    def part(self, key: str, group: dict[str, Any]) -> Part:
        """The merge patch of ``status.losses`` still to write."""
        pending = self._shown(key, group)
        return Part({LOSSES: dict(pending)}) if pending else NOTHING

    def _shown(self, key: str, group: dict[str, Any]) -> dict[str, str | None]:
        """The records still pending: those the cluster shows already are dropped."""
        pending = self._pending.get(key)
        if not pending:
            return {}
        stored = _stored(group)
        for job in [j for j, value in pending.items() if stored.get(j) == value]:
            del pending[job]
        if not pending:
            del self._pending[key]
        return pending

    def forget(self, key: str) -> None:
        self._pending.pop(key, None)

    def knows(self, key: str) -> bool:
        return key in self._pending


def _stored(group: dict[str, Any]) -> dict[str, Any]:
    stored = (group.get("status") or {}).get(LOSSES)
    return stored if isinstance(stored, dict) else {}

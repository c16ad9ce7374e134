"""What one forge answer, and one observation, may cost: every JSON size and item bound of
the forge clients, in one place.

A tenant chooses ``spec.gitea.url``, so what comes back is hostile input to one process that
serves every team. Bytes alone do not bound memory: 16 MiB of ``{},`` parses into 5.6 million
dicts (about 430 MB), so

- one answer is at most ``ANSWER_MAX_BYTES`` and at most ``ANSWER_MAX_VALUES`` JSON values,
  counted on the raw bytes *before* parsing (:func:`values_at_most`), which bounds what the
  parse allocates (a value is at most ~100 bytes of Python objects beyond its own text);
- a page holds at most the page size it was asked for (checked by the clients);
- one observation reads at most ``OBSERVATION_MAX_BYTES`` and keeps at most
  ``OBSERVATION_MAX_ITEMS`` listed items over all its pages and lists (:class:`AnswerBudget`),
  which also bounds Forgejo's unpaged job list. Past any of these, the group's condition says
  ``GiteaAnswerTooLarge``;
- what one namespace's groups read, parse and keep together is bounded by its share of the
  process-wide budget (kit/tenant_budget.py): :class:`AnswerBudget` charges each chunk as it
  arrives and ``PARSED_PER_BYTE`` times the body before it is parsed; past the share, the
  group says ``TenantMemoryBudget``;
- answers above ``HEAVY_BYTES`` (a page of many jobs; a healthy poll's answer is a few KiB)
  are parsed, and their page processed, one per turn of the event loop (kit/turnstile.py):
  an answer of another tenant that arrives meanwhile is read before the next, not after
  every page in flight;
- answers above ``OFF_LOOP_BYTES`` are counted, parsed and checked in one thread of their own
  (:func:`decode`). ``json.loads`` holds the GIL, so that thread does not make a parse free
  for the event loop: the value cap is what bounds each stall (a parse of
  ``ANSWER_MAX_VALUES`` values is some tens of milliseconds); the thread takes the counting
  and the depth walk off the loop, and, being one, lets one hostile parse run at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from typing import Any, Final

from gitea_runner_operator.forge.errors import (
    GiteaAnswerTooLarge,
    GiteaProtocolError,
    GiteaTenantBudget,
)
from gitea_runner_operator.kit.jsonlimits import too_deep
from gitea_runner_operator.kit.priority import PICKUPS
from gitea_runner_operator.kit.tenant_budget import Lease, OverShare
from gitea_runner_operator.kit.thread_names import name_this_thread
from gitea_runner_operator.kit.turnstile import Turnstile

# A page of 50 runners or jobs is tens of KiB; Forgejo's unpaged job list a few MiB.
ANSWER_MAX_BYTES: Final = 16 * 1024 * 1024
# A Gitea job is ~40 values with its steps, a Forgejo job ~20: 15,000 of those fit.
ANSWER_MAX_VALUES: Final = 300_000
# Gitea's answers nest a few levels; anything deeper is not Gitea.
MAX_JSON_DEPTH: Final = 32
# 200 pages of 50 runners and as many of queued jobs are ~10 MiB and 20,000 items.
OBSERVATION_MAX_BYTES: Final = 32 * 1024 * 1024
OBSERVATION_MAX_ITEMS: Final = 25_000
OFF_LOOP_BYTES: Final = 256 * 1024
HEAVY_BYTES: Final = 16 * 1024
# What a parsed answer holds in Python objects per byte of its JSON, at most: measured with
# tracemalloc, 2.1 for a Gitea job page with 64 labels of 45 characters, 4.1 for one with a
# short label per job.
PARSED_PER_BYTE: Final = 4
# Counting runs in slices, so the GIL goes back to the event loop between them.
_SLICE: Final = 1024 * 1024

_PARSING = concurrent.futures.ThreadPoolExecutor(
    max_workers=1, thread_name_prefix="forge-json", initializer=name_this_thread
)
# One for the process: every tenant's heavy answers take their turns here.
HEAVY_ANSWERS = Turnstile()


class AnswerBudget:
    """What one observation may still read (bytes) and keep (listed items); with ``tenant``,
    what it reads and parses is also charged, as it happens, to its namespace's share."""

    def __init__(
        self,
        max_bytes: int = OBSERVATION_MAX_BYTES,
        max_items: int = OBSERVATION_MAX_ITEMS,
        tenant: Lease | None = None,
    ) -> None:
        self.max_bytes, self.max_items = max_bytes, max_items
        self.bytes = self.items = 0
        self.received = 0  # every chunk that arrived, an answer refused midway included
        self.tenant = tenant

    def reading(self, count: int, where: str) -> None:
        """``count`` more bytes of a body arrived."""
        self.received += count
        self._charge(count, where)

    def parsing(self, count: int, where: str) -> None:
        """A body of ``count`` bytes is about to be parsed: what it parses into is held
        until the observation ends (its items are kept from it); the body itself goes."""
        self._charge(PARSED_PER_BYTE * count, where)
        if self.tenant is not None:
            self.tenant.release(count)

    def _charge(self, count: int, where: str) -> None:
        if self.tenant is None:
            return
        try:
            self.tenant.charge(count)
        except OverShare as exc:
            raise GiteaTenantBudget(f"{where}: {exc}; read no further") from None

    def spend_bytes(self, count: int, where: str) -> None:
        self.bytes += count
        if self.bytes > self.max_bytes:
            raise GiteaAnswerTooLarge(
                f"{where}: the answers of one observation exceed "
                f"{self.max_bytes // (1024 * 1024)} MiB; not read further"
            )

    def spend_items(self, count: int, where: str) -> None:
        self.items += count
        if self.items > self.max_items:
            raise GiteaAnswerTooLarge(
                f"{where}: one observation lists more than {self.max_items} runners and jobs"
            )


def check_page(count: int, page_size: int, where: str) -> None:
    """A page never holds more than it was asked for (Gitea and Forgejo clamp down)."""
    if count > page_size:
        raise GiteaAnswerTooLarge(
            f"{where}: a page holds {count} items, more than the {page_size} asked for"
        )


def values_at_most(body: bytes) -> int:
    """An upper bound on the JSON values ``body`` parses into: every value but the first
    follows a ``[``, a ``{`` or a ``,`` (those inside strings only make it larger)."""
    count = 1
    for at in range(0, len(body), _SLICE):
        end = at + _SLICE
        count += body.count(b"[", at, end) + body.count(b"{", at, end) + body.count(b",", at, end)
    return count


def parse(body: bytes, where: str) -> Any:
    """The answer's JSON, if it is small enough in values and depth to be Gitea's."""
    if values_at_most(body) > ANSWER_MAX_VALUES:
        raise GiteaAnswerTooLarge(
            f"{where}: the answer holds more than {ANSWER_MAX_VALUES} JSON values; not parsed"
        )
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise GiteaProtocolError(f"{where}: response is not JSON") from None
    if too_deep(value, MAX_JSON_DEPTH):
        raise GiteaProtocolError(f"{where}: response nests deeper than Gitea's API")
    return value


async def decode(body: bytes, where: str, tenant: str = "") -> Any:
    """:func:`parse`, in its turn when the body is heavy (what the caller does with the value
    runs in the same step of the loop, so the turn covers it too), in the parsing thread when
    it is big; and, of any size, after making way for a pickup under way (kit/priority.py;
    ``tenant``: whose answer): the requests in flight when a delivery woke a group still
    land during its pickup, and their parsing and processing is most of what they cost."""
    await PICKUPS.make_way(tenant)  # what answers land during a pickup wait to be parsed
    if len(body) > HEAVY_BYTES:
        await HEAVY_ANSWERS.turn()
    if len(body) <= OFF_LOOP_BYTES:
        return parse(body, where)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_PARSING, parse, body, where)

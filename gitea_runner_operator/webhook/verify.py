"""The verify stage: who signed a delivery, and so which groups it may wake.

- A delivery signed with the **operator-wide** secret (a system hook, set up by the Gitea
  and cluster admins) may wake every group that routing picks.
- A delivery signed with a **group's** secret (``spec.webhook.secretRef``) may wake only the
  groups that hold that same secret, and that secret is tried only for groups whose scope
  covers the repository the payload names. So team A's secret never verifies a payload
  about a repository outside A's scope, and never wakes team B's groups, whatever the
  payload says.
- Anything else (no signature, a malformed one, one no candidate secret produced) is 401
  and changes nothing. The body is never logged.

Cheapest first, because verification comes before parsing: the operator-wide secret (one
HMAC), then the group a managed hook's URL names (one more), and only then the groups whose
scope covers the repository a bounded prefix of the body names (:func:`repository_hint`: at
most ``MAX_HINT_TRIES`` decodes of at most ``PREFIX_BYTES`` each, whatever the body), with
at most ``MAX_CANDIDATE_SECRETS`` distinct secrets tried. Signatures over big bodies are
computed off the event loop, in one thread of their own: a flood then costs at most one
core of hashing, and the event loop (the Lease, the polls) competes with one busy thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from aiohttp import web

from gitea_runner_operator.kit.jsonlimits import too_deep
from gitea_runner_operator.kit.thread_names import name_this_thread
from gitea_runner_operator.webhook import routing, signature
from gitea_runner_operator.webhook.answers import NOT_A_REPOSITORY, PENALISED, UNAUTHORIZED, Answer
from gitea_runner_operator.webhook.guard import Penalties, QuietLog
from gitea_runner_operator.webhook.ports import Operator
from gitea_runner_operator.webhook.routing import (
    GroupDescriptor,
    Repository,
    SecretLocation,
    parse_repository,
    scope_covers,
)
from gitea_runner_operator.webhook.secrets import SecretProvider

T = TypeVar("T")

# A workflow_job payload names its repository after the job (a few KiB with its steps).
PREFIX_BYTES: Final = 64 * 1024
MAX_CANDIDATE_SECRETS: Final = 16
# A genuine payload's first ``"repository": {`` is the one routing reads; a few more tries
# only forgive oddities, and bound what a forged body can make us decode.
MAX_HINT_TRIES: Final = 4
# Bytes hashed per delivery above which the HMACs run in a thread, off the event loop.
OFFLOAD_BYTES: Final = 256 * 1024


_HASHING = concurrent.futures.ThreadPoolExecutor(
    max_workers=1, thread_name_prefix="webhook-hmac", initializer=name_this_thread
)


async def signers(candidates: Sequence[tuple[T, bytes]], body: bytes, digest: bytes) -> list[T]:
    """:func:`signature.matching`, off the event loop (in the one hashing thread) when the
    work is big."""
    if len(body) * max(1, len(candidates)) < OFFLOAD_BYTES:
        return signature.matching(candidates, body, digest)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_HASHING, signature.matching, candidates, body, digest)


# ``"repository"`` as an object key: the quotes, optional blanks, a colon, an object.
_REPOSITORY_KEY: Final = re.compile(r'"repository"[ \t\r\n]*:[ \t\r\n]*(?=\{)')
_DECODER: Final = json.JSONDecoder()


def repository_hint(body: bytes) -> Repository | None:
    """The repository a delivery names, read from its first ``PREFIX_BYTES`` only: enough
    to pick which groups' secrets may have signed it. Never trusted beyond that: routing
    reads the verified whole body again.

    It runs before any signature is checked, so its cost must not depend on what a forger
    puts in the body: one regular-expression scan of the prefix, and at most
    ``MAX_HINT_TRIES`` decodes of an object found there (each bounded by the prefix)."""
    text = body[:PREFIX_BYTES].decode("utf-8", errors="ignore")
    for tries, match in enumerate(_REPOSITORY_KEY.finditer(text)):
        if tries >= MAX_HINT_TRIES:
            return None
        try:
            value, _ = _DECODER.raw_decode(text, match.end())
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict) and not too_deep(value, routing.MAX_DEPTH):
            repository = parse_repository({"repository": value})
            if repository is not None:
                return repository
    return None


_SPECIFIC = {"repo": 0, "org": 1, "global": 2}


async def candidate_secrets(
    repository: Repository | None,
    groups: Iterable[GroupDescriptor],
    provider: SecretProvider | None,
    at_hand: Callable[[SecretLocation], bytes | None] | None = None,
) -> list[tuple[GroupDescriptor, bytes]]:
    """The per-group secrets that may vouch for a delivery about ``repository``: those of the
    groups whose scope covers it. Those ``at_hand`` knows (read lately) are taken as they are;
    only the others are fetched, each once, concurrently."""
    if repository is None or provider is None:
        return []
    eligible = [g for g in groups if g.webhook_secret is not None and scope_covers(g, repository)]
    # The most specific scopes first, and a bounded number of distinct secrets: a tenant
    # cannot make every forged delivery cost hundreds of HMACs by creating groups.
    eligible.sort(key=lambda g: (_SPECIFIC.get(g.scope.value, 3), g.key))
    locations = list(dict.fromkeys(g.webhook_secret for g in eligible if g.webhook_secret))
    locations = locations[:MAX_CANDIDATE_SECRETS]
    by_location = await _secrets_of(locations, provider, at_hand)
    out: list[tuple[GroupDescriptor, bytes]] = []
    for group in eligible:
        assert group.webhook_secret is not None
        value = by_location.get(group.webhook_secret)
        if value:
            out.append((group, value))
    return out


async def _secrets_of(
    locations: list[SecretLocation],
    provider: SecretProvider,
    at_hand: Callable[[SecretLocation], bytes | None] | None,
) -> dict[SecretLocation, bytes | None]:
    """Each location's secret. Every task and gather costs a turn of the event loop, and
    each turn makes the delivery wait for everything else the loop has to do (other tenants'
    answers, forged deliveries): a delivery whose secrets were all read lately is verified
    without yielding the loop at all."""
    found: dict[SecretLocation, bytes | None] = {
        where: at_hand(where) if at_hand is not None else None for where in locations
    }
    missing = [where for where, value in found.items() if value is None]
    if len(missing) == 1:  # awaited in place: no task
        found[missing[0]] = await provider(missing[0])
    elif missing:
        values = await asyncio.gather(*(provider(where) for where in missing))
        found.update(zip(missing, values, strict=True))
    return found


@dataclass(frozen=True, slots=True)
class Verified:
    """The body, and the groups its signer may wake."""

    body: bytes
    groups: list[GroupDescriptor]


class Verifier:
    """``operator_secret``: the operator-wide secret, if one is configured."""

    def __init__(
        self,
        operator: Operator,
        operator_secret: bytes | None,
        penalties: Penalties,
        quiet: QuietLog,
    ) -> None:
        self._operator = operator
        self._operator_secret = signature.hmac_key(operator_secret) if operator_secret else None
        self._penalties = penalties
        self._quiet = quiet

    def hint_only(self, request: web.Request) -> bool:
        """Whether only the repository hint could find who signed this delivery: no
        operator-wide secret, and no managed hook's ``?group=``."""
        return self._operator_secret is None and "group" not in request.query

    async def verify(
        self, request: web.Request, body: bytes, digest: bytes, event: str, *, charged: bool = True
    ) -> Answer | Verified:
        """Find who signed the body, cheapest first (see the module). A failure (400, 401) is
        charged to the sender's address and the target the delivery names (guard.Penalties),
        a success remembered for them: one tenant's wrong secret costs its own target only.
        ``charged=False``: a peer replica's authenticated forward, neither charged nor held
        back for what Gitea's signature does at this end."""
        peer = request.remote or ""
        found, target = await self._verify(request, body, digest, event, charged)
        if not charged:
            return found
        if isinstance(found, Verified):
            self._penalties.verified(peer, target)
        elif found.status in (400, 401):
            self._penalties.failed(peer, target)
        return found

    async def _verify(
        self, request: web.Request, body: bytes, digest: bytes, event: str, charged: bool
    ) -> tuple[Answer | Verified, str]:
        """What :meth:`verify` finds, and the target it is charged to or remembered for."""
        groups = list(self._operator.groups())
        if self._operator_secret is not None and await signers(
            [(True, self._operator_secret)], body, digest
        ):
            return Verified(body, groups), ""
        named = request.query.get("group")
        if named is not None:
            target = f"group:{named[:256]}"
            group = next((g for g in groups if g.key == named), None)
            secret = (
                await self._operator.secret(group.webhook_secret)
                if group is not None and group.webhook_secret is not None
                else None
            )
            if group is not None and secret and await signers([(True, secret)], body, digest):
                alike = [g for g in groups if g.webhook_secret == group.webhook_secret]
                return Verified(body, alike), target
            self._quiet("webhook delivery rejected", remote=request.remote, gitea_event=event)
            return UNAUTHORIZED, target
        if not any(g.webhook_secret is not None for g in groups):
            self._quiet("webhook delivery rejected", remote=request.remote, gitea_event=event)
            return UNAUTHORIZED, ""
        repository = repository_hint(body)
        if repository is None:
            return NOT_A_REPOSITORY, ""
        target = f"repo:{repository.full_name.casefold()}"
        if charged and self._penalties.exhausted(request.remote or "", target):
            return PENALISED, target  # the secrets' lookup is what a flood must not buy
        candidates = await candidate_secrets(
            repository, groups, self._operator.secret, self._operator.secret_at_hand
        )
        signed_by = await signers(candidates, body, digest)
        if not signed_by:
            self._quiet(
                "webhook delivery rejected: no configured secret produced its signature",
                remote=request.remote,
                gitea_event=event,
                repository=repository.full_name,
            )
            return UNAUTHORIZED, target
        vouched = {g.key for g in signed_by}
        return Verified(body, [g for g in groups if g.key in vouched]), target

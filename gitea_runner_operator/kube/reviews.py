"""Who may read ``/metrics``: the way Kubernetes components protect theirs. A scrape carries
a bearer token; a TokenReview says whose it is and a SubjectAccessReview whether that user
may ``get`` the non-resource URL ``/metrics`` (a ClusterRole with ``nonResourceURLs``).

Anyone who reaches the port can send tokens, so the answers are remembered (by the token's
SHA-256, never the token) for a while, concurrent scrapes with one token share one review,
and tokens not seen before are reviewed at a bounded rate (429 beyond): a flood of invented
tokens costs the API server a few reviews a second, and Prometheus, whose token is known,
keeps getting its answers.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kubernetes_asyncio import client

from gitea_runner_operator.kit.bucket import Bucket
from gitea_runner_operator.kit.singleflight import SingleFlight
from gitea_runner_operator.kit.ttlcache import TTLCache
from gitea_runner_operator.kube.http import REVIEW_TIMEOUT

# Seconds an answer is trusted: a granted one for a minute (a revoked binding takes effect
# within it), a refused one briefly (a binding just made takes effect soon).
GRANTED_TTL: Final = 60.0
REFUSED_TTL: Final = 10.0
MAX_TOKENS: Final = 1024
# Reviews of tokens not seen before: this many per second on average, bursts of NEW_BURST.
NEW_PER_SECOND: Final = 2.0
NEW_BURST: Final = 10

OK: Final = 200
UNAUTHENTICATED: Final = 401
FORBIDDEN: Final = 403
TOO_MANY: Final = 429
UNAVAILABLE: Final = 503


@dataclass(frozen=True, slots=True)
class Reviewed:
    authenticated: bool
    allowed: bool


class Reviewer(Protocol):
    async def review(self, token: str) -> Reviewed: ...


class ApiReviewer:
    """The two reviews against the API server (``create`` on ``tokenreviews`` and
    ``subjectaccessreviews``). Any failure to ask raises."""

    def __init__(self, api: client.ApiClient, path: str = "/metrics") -> None:
        self._authn: Any = client.AuthenticationV1Api(api)
        self._authz: Any = client.AuthorizationV1Api(api)
        self._path = path

    async def review(self, token: str) -> Reviewed:
        token_review = await self._authn.create_token_review(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
            _request_timeout=REVIEW_TIMEOUT,
        )
        status = token_review.status
        if status is None or not status.authenticated or status.user is None:
            return Reviewed(authenticated=False, allowed=False)
        user = status.user
        access = await self._authz.create_subject_access_review(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.username,
                    "uid": user.uid,
                    "groups": user.groups or [],
                    "extra": user.extra or {},
                    "nonResourceAttributes": {"path": self._path, "verb": "get"},
                },
            },
            _request_timeout=REVIEW_TIMEOUT,
        )
        allowed = bool(access.status is not None and access.status.allowed)
        return Reviewed(authenticated=True, allowed=allowed)


class MetricsAccess:
    """The answer (an HTTP status) for a scrape's ``Authorization`` header."""

    def __init__(
        self,
        reviewer: Reviewer,
        *,
        new_per_second: float = NEW_PER_SECOND,
        new_burst: int = NEW_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reviewer = reviewer
        self._new = Bucket(new_per_second, new_burst, clock())
        self._clock = clock
        self._answers: TTLCache[bytes, int] = TTLCache(
            GRANTED_TTL, max_entries=MAX_TOKENS, clock=clock
        )
        self._reviews: SingleFlight[bytes, int] = SingleFlight()
        self.reviews = 0  # reviews asked for, for tests and benchmarks

    async def check(self, authorization: str | None) -> int:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return UNAUTHENTICATED
        key = hashlib.sha256(token.encode()).digest()
        known = self._answers.get(key)
        if known is not None:
            return known
        if key not in self._reviews and not self._new.take(self._clock()):
            return TOO_MANY
        return await self._reviews.run(key, lambda: self._review(key, token))

    async def _review(self, key: bytes, token: str) -> int:
        self.reviews += 1
        try:
            reviewed = await self._reviewer.review(token)
        except Exception:  # the API server unreachable, a timeout, a refusal: not an answer
            return UNAVAILABLE
        if not reviewed.authenticated:
            answer = UNAUTHENTICATED
        else:
            answer = OK if reviewed.allowed else FORBIDDEN
        self._answers.put(key, answer, ttl=GRANTED_TTL if answer == OK else REFUSED_TTL)
        return answer

"""What the receiver answers, and what each answer counts as (``Outcome``, for the
deliveries metric). A verified sender (Gitea's "Recent deliveries") reads the text; an
unverified one learns only "401"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

EVENT_HEADER: Final = "X-Gitea-Event"
DELIVERY_HEADER: Final = "X-Gitea-Delivery"

Outcome = Literal[
    "accepted",
    "ignored",
    "unauthorized",
    "too_large",
    "bad_request",
    "standby",
    "busy",
    "duplicate",
    "slow",
    "gone",
    "penalised",
    "unsupported",
]


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: Outcome
    status: int
    text: str = ""


UNAUTHORIZED: Final = Answer("unauthorized", 401, "signature missing or not valid\n")
TOO_LARGE: Final = Answer("too_large", 413, "body too large\n")
STANDBY: Final = Answer("standby", 503, "a standby replica: the leader acts on deliveries\n")
BUSY: Final = Answer("busy", 429, "too many deliveries at once; retry later\n")
DUPLICATE: Final = Answer("duplicate", 202, "delivery already seen\n")
SLOW: Final = Answer("slow", 408, "the body did not arrive in time\n")
# Nobody reads this answer: the client is gone. The outcome still counts it.
GONE: Final = Answer("gone", 400, "")
PENALISED: Final = Answer(
    "penalised", 429, "too many deliveries from this address failed authentication; retry later\n"
)
UNSUPPORTED: Final = Answer("unsupported", 415, "Content-Type must be application/json\n")
NOT_A_REPOSITORY: Final = Answer("bad_request", 400, "repository.full_name: must be 'owner/name'\n")
# What a genuine delivery (Gitea's and Forgejo's "application/json" hooks) carries.
JSON: Final = "application/json"

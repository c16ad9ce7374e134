"""Shard buckets: the label a runner Job and its Pods carry so that, under ``--sharding``,
the API server sends each replica only the Jobs and Pods of the domains it holds.

A capacity domain (sharding/domains.py) falls into one of :data:`SHARDS` fixed buckets, and
replicas hold whole buckets (sharding/tenure.owner bids for a domain's bucket, not for the
domain): a replica's Job and Pod watches select ``shard in (<its buckets>)``. A value of the
API, so the Job template (objects/) and the create step (reconcile/) name it without
reaching the sharding rules.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

# Fixed for good: a Job's label is set at its creation, and a replica of another S would
# select other buckets. 128 spreads the domains of a few replicas evenly (each holds about
# 128/N buckets) and keeps a selector's value list short.
SHARDS: Final = 128
_ID_BYTES = 6  # 12 hex digits: collisions among a few thousand domains are negligible


def domain_id(members: Iterable[str]) -> str:
    """A domain's id, named by its smallest member key, hashed so that the id says nothing
    of the tenant and has a fixed length for labels and annotations."""
    digest = hashlib.sha256(min(members).encode()).hexdigest()
    return f"d-{digest[: 2 * _ID_BYTES]}"


def shard_of(domain: str) -> int:
    """The bucket of a domain id: its hex digits mod :data:`SHARDS` (they are a hash
    already). An id of another form (tests name domains freely) is hashed first."""
    digits = domain.removeprefix("d-")
    try:
        value = int(digits, 16)
    except ValueError:
        value = int.from_bytes(hashlib.sha256(domain.encode()).digest()[:8], "big")
    return value % SHARDS


def shard_label(domain: str) -> str:
    """The label value of the domain's bucket."""
    return str(shard_of(domain))


def lone_shard(group_key: str) -> str:
    """The bucket of a group that is a domain of its own (one replica: every group is)."""
    return shard_label(domain_id([group_key]))

"""The wall-clock times the operator writes, in the two forms Kubernetes reads: written once
so that status, snapshots and Leases cannot drift apart in how they spell a moment.
"""

from __future__ import annotations

import datetime as dt


def iso_seconds(when: dt.datetime) -> str:
    """``when`` in UTC to the second, ``Z``-suffixed: the RFC 3339 form of a status ``Time``,
    which a user reads and compares, so no fraction that would only look like precision."""
    return when.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def utc_now_iso() -> str:
    """Now, as :func:`iso_seconds` spells it."""
    return iso_seconds(dt.datetime.now(dt.UTC))


def utc_now_micro() -> str:
    """Now to the microsecond, ``Z``-suffixed: a Lease's ``MicroTime``, whose renewals a few
    seconds apart must still compare as different."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso_timestamp(iso: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (``...Z``), or None if it is not one: a
    time a status or a snapshot carries, read back."""
    try:
        return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None

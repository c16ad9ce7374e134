"""Runner names that prove whose runner a Gitea registration is.

Gitea's runner list is shared by everyone registered on a scope: other RunnerGroups with the
same name in other namespaces, the same group in another cluster, static runners. A runner
registers under its Pod's name, so the name is our only link from a registration back to a
RunnerGroup. It therefore carries a hash of the group's UID (unique per object and per
cluster): ``{name[:40]}-{hash8}-{job5}-{pod5}``. A registration that does not match this exact
pattern is never ours, whatever its name otherwise looks like.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from typing import Any, NamedTuple

from gitea_runner_operator.api import constants

# The alphabet of Kubernetes' generateName suffixes (no vowels, no look-alikes).
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX = f"[{SUFFIX_ALPHABET}]{{5}}"
_MAX_NAME_PART = 40  # keeps Job names <= 55 and Pod names <= 61 characters


class GroupKey(NamedTuple):
    """A RunnerGroup's key, ``namespace/name``: how the work queue, the informer cache and
    the poll tasks name a group. Keys travel as text; this is the one place that reads one
    or writes one, so no caller splits a key by hand."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, key: str) -> GroupKey:
        namespace, _, name = key.partition("/")
        return cls(namespace, name)

    @classmethod
    def of(cls, group: Mapping[str, Any]) -> GroupKey:
        meta = group["metadata"]
        return cls(meta["namespace"], meta["name"])

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def group_hash(uid: str) -> str:
    return hashlib.sha256(uid.encode()).hexdigest()[:8]


def runner_prefix(group_name: str, uid: str) -> str:
    """The start of every Job, Pod and registration name of this group."""
    return f"{group_name[:_MAX_NAME_PART].rstrip('-.')}-{group_hash(uid)}-"


def new_job_name(group_name: str, uid: str) -> str:
    """A Job name chosen before the create, so the create can be expected before it is made
    (a name we know beats a count when the watch is faster than the create's response)."""
    suffix = "".join(secrets.choice(SUFFIX_ALPHABET) for _ in range(5))
    return runner_prefix(group_name, uid) + suffix


def runner_pattern(group_name: str, uid: str) -> re.Pattern[str]:
    """Pod (= registration) names of this group: ``{prefix}{job5}-{pod5}``."""
    return re.compile(rf"^{re.escape(runner_prefix(group_name, uid))}{_SUFFIX}-{_SUFFIX}$")


def job_name_pattern(group_name: str, uid: str) -> re.Pattern[str]:
    """Runner Job names of this group: ``{prefix}{job5}``. A Forgejo runner is registered
    through the API before its Pod exists, so its registration carries the Job's name."""
    return re.compile(rf"^{re.escape(runner_prefix(group_name, uid))}{_SUFFIX}$")


def owner_reference(group_name: str, group_uid: str) -> dict[str, Any]:
    """The RunnerGroup as the controlling owner of an object it made (runner Jobs, cache
    objects): deleting the group deletes them, and the group's label alone proves nothing."""
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND,
        "name": group_name,
        "uid": group_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }

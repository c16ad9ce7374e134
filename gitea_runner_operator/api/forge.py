"""Which forge a group talks to (Gitea or Forgejo), and Forgejo's Actions payloads as values.

Forgejo 15 differs from Gitea in almost every detail an autoscaler touches (paths, envelopes,
status names, registration, handles); see docs/forgejo.md. These values keep
those differences at the edge: ``forge/forgejo.py`` maps Forgejo's answers onto the same
:class:`~gitea_runner_operator.api.gitea.ActionJob` and ``ActionRunner`` values the Gitea
path produces, so decisions (scaling, accounting, reaping) stay forge-blind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import Field

from gitea_runner_operator.api import caps
from gitea_runner_operator.api.gitea import Id, Name, Payload, Status

# Forgejo 15 added the runner registration API (POST .../actions/runners) and job handles;
# older releases cannot give a runner its own credentials.
MIN_FORGEJO_MAJOR = 15
# The runner that knows ``one-job --handle`` and the ``--url/--uuid/--token-url`` flags is
# v12.8.0 or later; this release is pinned as the default image.
FORGEJO_RUNNER_IMAGE = "code.forgejo.org/forgejo/runner:12.13.2"
FORGEJO_RUNNER_MIN_VERSION = "12.8.0"


class Flavor(StrEnum):
    """``spec.gitea.flavor``: which API the URL serves. ``auto`` asks the server."""

    AUTO = "auto"
    GITEA = "gitea"
    FORGEJO = "forgejo"


@dataclass(frozen=True, slots=True)
class ForgeInfo:
    """What the server said it is. ``version`` is the server's own string, shown as is."""

    flavor: Flavor
    version: str = ""
    detected: bool = True  # False: spec.gitea.flavor said so and the server was not asked

    @property
    def is_forgejo(self) -> bool:
        return self.flavor is Flavor.FORGEJO


_MAJOR = re.compile(r"^v?(\d+)(?:\.(\d+))?")


def forgejo_major(version: str) -> int | None:
    """The major release of a Forgejo version string such as ``15.0.3+gitea-1.22.0``
    (never compared with Gitea numbers: Forgejo counts on its own since v7)."""
    match = _MAJOR.match(version.strip())
    return int(match.group(1)) if match else None


def forgejo_supported(version: str) -> bool:
    major = forgejo_major(version)
    return major is not None and major >= MIN_FORGEJO_MAJOR


class ForgejoJob(Payload):
    """One entry of ``GET …/actions/runners/jobs`` (``structs.ActionRunJob``)."""

    id: Id
    attempt: Id = 0
    handle: str = Field(default="", max_length=caps.HANDLE_MAX_CHARS)
    repo_id: Id = 0
    owner_id: Id = 0
    name: Name = ""
    needs: tuple[Name, ...] | None = Field(default=None, max_length=caps.JOB_LABELS_MAX)
    runs_on: tuple[caps.JobLabel, ...] | None = Field(default=None, max_length=caps.JOB_LABELS_MAX)
    task_id: Id = 0
    status: Status


class ForgejoRunner(Payload):
    """One entry of ``GET …/actions/runners`` (``structs.ActionRunner``); no ``busy``."""

    id: Id
    uuid: Name = ""
    owner_id: Id = 0
    repo_id: Id = 0
    name: Name = ""
    status: Status = ""
    version: Name = ""
    labels: tuple[caps.SpecLabel, ...] | None = Field(
        default=None, max_length=caps.RUNNER_LABELS_MAX
    )
    description: str = Field(default="", max_length=caps.ANSWER_DESCRIPTION_MAX_CHARS)
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class RegisteredRunner:
    """The answer to ``POST …/actions/runners``. The token exists only here and in the
    runner's Secret: it is never shown (repr hides it) and cannot be read back."""

    id: int
    uuid: str
    token: str = field(repr=False)

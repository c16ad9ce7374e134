"""The route stage: which RunnerGroups a verified ``workflow_job`` delivery should wake, by
functions of plain data (the body is read whole only here, after verification).

A delivery is a *trigger*, never a count: it only makes the groups that could serve the job
refresh from Gitea at once. So routing may err on the side of waking a group that turns out to
have nothing to do (one extra poll), but must never act on what the payload says beyond that.

A group is woken when all of these hold:

- the action is one that changes a group's demand or capacity (:data:`WAKE_ACTIONS`):
  ``queued`` (new demand), ``in_progress`` (a runner took a job), ``completed`` (a slot is
  free). ``waiting`` is a job held by ``needs:``, approval or concurrency: it is not demand
  (Gitea sends ``queued`` when it is released), so it wakes nobody;
- the group's Gitea instance is the one that sent it, when the payload says which: the instance
  URL is ``repository.html_url`` without its trailing ``/{owner}/{name}`` (Gitea derives it from
  its ``ROOT_URL``), compared with the group's ``spec.gitea.url`` by scheme, host, port and path.
  A payload without ``html_url`` is matched on scope alone;
- the group's scope covers the repository: ``global`` any, ``org`` the same owner, ``repo`` the
  same owner and name (Gitea's names are case-insensitive, so are these comparisons);
- every label of the job (its ``runs-on``) is one of the group's label names, exactly and
  case-sensitively, as Gitea hands jobs to runners.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import structlog

from gitea_runner_operator.api import scope as scope_rule
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.kit.jsonlimits import too_deep
from gitea_runner_operator.webhook.answers import Answer

log = structlog.get_logger(__name__)

WAKE_ACTIONS: Final = frozenset({"queued", "in_progress", "completed"})
KNOWN_ACTIONS: Final = WAKE_ACTIONS | {"waiting"}
MAX_DEPTH: Final = 32


@dataclass(frozen=True, slots=True)
class SecretLocation:
    """A key of a Secret; the value is fetched by a provider, never carried around."""

    namespace: str
    name: str
    key: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}[{self.key}]"


@dataclass(frozen=True, slots=True)
class GroupDescriptor:
    """What routing needs to know about one RunnerGroup. ``key`` is what ``wake`` receives
    (the work queue's ``namespace/name``); ``webhook_secret`` is the group's own hook secret,
    which authorises deliveries for this group only."""

    key: str
    gitea_url: str
    scope: Scope
    org: str | None
    repo: str | None
    label_names: frozenset[str]
    webhook_secret: SecretLocation | None = None


@dataclass(frozen=True, slots=True)
class Repository:
    owner: str
    name: str
    html_url: str | None = None

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True, slots=True)
class JobDelivery:
    """The parts of a ``workflow_job`` payload routing reads."""

    action: str
    repository: Repository
    labels: tuple[str, ...]
    # Gitea's id of the job, when the payload has a usable one: logged only (at debug), so a
    # delivery can be followed to the runner Job it led to (tests/benchmarks/webhook_latency.py).
    job_id: int | None = None


class BadDelivery(ValueError):
    """A payload that is not a usable ``workflow_job`` delivery; the message names the field."""


def parse_repository(payload: Any) -> Repository | None:
    """The repository a payload is about, if it names one. Used before the signature is checked
    (to pick which groups' secrets may have signed it), so it never raises."""
    if not isinstance(payload, Mapping):
        return None
    repo = payload.get("repository")
    if not isinstance(repo, Mapping):
        return None
    owner: Any = None
    name: Any = None
    full_name = repo.get("full_name")
    if isinstance(full_name, str) and full_name.count("/") == 1:
        owner, name = full_name.split("/")
    else:
        owner_obj = repo.get("owner")
        owner = owner_obj.get("login") if isinstance(owner_obj, Mapping) else None
        name = repo.get("name")
    if not isinstance(owner, str) or not isinstance(name, str) or not owner or not name:
        return None
    html_url = repo.get("html_url")
    return Repository(owner, name, html_url if isinstance(html_url, str) and html_url else None)


def parse_job_delivery(payload: Any) -> JobDelivery:
    """Validate a ``workflow_job`` payload, naming the first field that is missing or wrong."""
    if not isinstance(payload, Mapping):
        raise BadDelivery("body: must be a JSON object")
    action = payload.get("action")
    if not isinstance(action, str) or not action:
        raise BadDelivery("action: must be a non-empty string")
    repository = parse_repository(payload)
    if repository is None:
        raise BadDelivery("repository.full_name: must be 'owner/name'")
    job = payload.get("workflow_job")
    if not isinstance(job, Mapping):
        raise BadDelivery("workflow_job: must be an object")
    labels = job.get("labels")
    if labels is None:
        labels = []
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise BadDelivery("workflow_job.labels: must be a list of strings")
    job_id = job.get("id")
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        job_id = None
    return JobDelivery(action=action, repository=repository, labels=tuple(labels), job_id=job_id)


def _origin_and_path(url: str) -> tuple[str, str, int | None, str] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    if port == {"http": 80, "https": 443}[scheme]:
        port = None
    return scheme, parts.hostname.lower(), port, parts.path.rstrip("/")


def instance_of(repository: Repository) -> tuple[str, str, int | None, str] | None:
    """The sending instance's base URL (normalised), from ``html_url`` = ROOT_URL + full name.
    None when the payload has no ``html_url`` or it does not end in the repository's name."""
    if repository.html_url is None:
        return None
    parsed = _origin_and_path(repository.html_url)
    suffix = "/" + repository.full_name.casefold()
    if parsed is None or not parsed[3].casefold().endswith(suffix):
        return None
    scheme, host, port, path = parsed
    return scheme, host, port, path[: len(path) - len(suffix)]


def same_instance(repository: Repository, gitea_url: str) -> bool:
    """Whether ``gitea_url`` is the instance that sent a delivery about ``repository``. A payload
    without ``html_url`` says nothing about its instance, so it matches; one whose ``html_url``
    is malformed matches nothing (polling still finds the job)."""
    if repository.html_url is None:
        return True
    sender = instance_of(repository)
    return sender is not None and sender == _origin_and_path(gitea_url)


def scope_covers(group: GroupDescriptor, repository: Repository) -> bool:
    """Whether the group's runners may take jobs of ``repository`` at all."""
    return scope_rule.scope_covers(
        group.scope, group.org, group.repo, repository.owner, repository.name
    )


def covers_repository(group: GroupDescriptor, repository: Repository) -> bool:
    """Same instance and a covering scope: the groups whose secret may vouch for a delivery."""
    return same_instance(repository, group.gitea_url) and scope_covers(group, repository)


def labels_cover(job_labels: Iterable[str], offered: frozenset[str]) -> bool:
    """Gitea hands a job to a runner only if *all* its ``runs-on`` labels are the runner's."""
    return scope_rule.labels_fit(job_labels, offered)


def route(delivery: JobDelivery, groups: Iterable[GroupDescriptor]) -> list[str]:
    """The keys of the groups to wake for ``delivery``, in the order given, without repeats."""
    if delivery.action not in WAKE_ACTIONS:
        return []
    keys: dict[str, None] = {}
    for group in groups:
        if covers_repository(group, delivery.repository) and labels_cover(
            delivery.labels, group.label_names
        ):
            keys[group.key] = None
    return list(keys)


class Malformed(ValueError):
    """The body is not a JSON object we can read (or nests absurdly deep)."""


def parse_body(body: bytes) -> Any:
    """The whole body, after verification; a malformed or deeply nested body is
    :class:`Malformed` (answered 400), never a RecursionError."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        raise Malformed("body: not JSON") from None
    if too_deep(payload, MAX_DEPTH):
        raise Malformed("body: nested too deeply")
    return payload


@dataclass(frozen=True, slots=True)
class Routed:
    delivery: JobDelivery
    keys: list[str]


def routed(event: str, body: bytes, authorised: list[GroupDescriptor]) -> Routed | Answer:
    """The verified body read whole, and the groups among ``authorised`` it concerns; or
    why it concerns none."""
    try:
        payload = parse_body(body)
    except Malformed as exc:
        return Answer("bad_request", 400, f"{exc}\n")
    if event != "workflow_job":
        return Answer("ignored", 204)
    try:
        delivery = parse_job_delivery(payload)
    except BadDelivery as exc:
        log.info("webhook delivery malformed", gitea_event=event, problem=str(exc))
        return Answer("bad_request", 400, f"{exc}\n")
    if delivery.action not in WAKE_ACTIONS:
        return Answer("ignored", 204)
    return Routed(delivery, route(delivery, authorised))

"""What a group's runner configuration (``spec.runnerConfig``) must not say.

The file is the user's, and mostly none of the operator's business (network, cache, capacity,
timeouts). But the real runner (gitea/runner v1.0.8) lets a few of its keys silently override
what the operator arranged, so runners start that can never do what the group promises:

- ``runner.labels``: ``register`` then ignores ``--labels`` ("Labels from command will be
  ignored, use labels defined in config file") and ``daemon`` declares these labels instead of
  the registered ones, so the runners offer other labels than ``spec.labels`` and the jobs the
  operator counted as demand are never taken;
- ``runner.file``: the ``gro-register`` init container writes the registration to
  ``/data/.runner`` and the image's entrypoint looks for ``.runner``; another file means the
  runner container finds no registration (and would need the registration token it no
  longer has);
- ``cache.external_server`` without ``cache.external_secret``: the runner refuses to start;
- a file that does not parse: the runner refuses to start.

Checked against the official runner's ``internal/pkg/config`` and ``internal/app/cmd``; the
testbed runner follows it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from gitea_runner_operator.api import caps, yamltext
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, RunnerMode
from gitea_runner_operator.kit.lru import LRU

DEFAULT_STATE_FILE = ".runner"

# Verdicts by (sha256 of the text, mode, init_registers), least recently used dropped
# first: an unchanged config is read on every poll, and parsed once.
VERDICTS: LRU[tuple[bytes, RunnerMode, bool], str | None] = LRU(caps.RUNNER_CONFIG_VERDICTS)


def registers_in_init(spec: RunnerGroupSpec) -> bool:
    """Whether ``gro-register`` registers the runner before it starts: for every Gitea group,
    in every mode. The registration token makes new runners of any labels, so it must never
    be in a container that runs job code or the Docker daemon jobs drive: in ``dind-rootless``
    that daemon runs in the runner container, and whatever its processes hold (their
    environment included) a job can ask it for. A group without one (Forgejo) registers each
    runner through the API instead (objects/forgejo_job.py)."""
    return spec.registration_token is not None


VerdictKey = tuple[bytes, RunnerMode, bool]


def known_problem(
    text: str, mode: RunnerMode, *, init_registers: bool = False
) -> tuple[VerdictKey | None, str | None]:
    """What is known of this config without parsing it: ``(None, why)`` past its size cap,
    ``(None, verdict)`` remembered, or ``(key, None)``: parse it (:func:`parse_problem`)
    and :func:`remember` the verdict under ``key``. The parse costs up to ~300 ms of CPU
    for 64 KiB, so a caller on the event loop runs it elsewhere."""
    encoded = text.encode()
    if len(encoded) > caps.RUNNER_CONFIG_MAX_BYTES:  # not hashed: refused by its size alone
        return None, (
            f"is {len(encoded)} bytes, more than the {caps.RUNNER_CONFIG_MAX_BYTES} bytes allowed"
        )
    key = (hashlib.sha256(encoded).digest(), mode, init_registers)
    if key in VERDICTS:
        return None, VERDICTS.get(key)
    return key, None


def parse_problem(text: str, key: VerdictKey) -> str | None:
    """The verdict of a config not remembered; reads nothing shared, so any thread may."""
    return _problem(text, key[1], key[2])


def remember(key: VerdictKey, verdict: str | None) -> str | None:
    VERDICTS.put(key, verdict)
    return verdict


def runner_config_problem(
    text: str, mode: RunnerMode, *, init_registers: bool = False
) -> str | None:
    """Why runners started with this config would not work as the group says, or None.
    ``init_registers``: see :func:`registers_in_init`. Past a cap (api/caps.py), why not.
    Remembered by content hash (``VERDICTS``, bounded)."""
    key, known = known_problem(text, mode, init_registers=init_registers)
    return known if key is None else remember(key, parse_problem(text, key))


def _problem(text: str, mode: RunnerMode, init_registers: bool) -> str | None:
    try:
        doc: Any = yamltext.load_within_caps(text)
    except yamltext.YamlRefused as exc:
        return str(exc)
    except yaml.YAMLError as exc:
        return f"does not parse as YAML, so the runner refuses to start ({_first_line(exc)})"
    if doc is None:
        return None
    if not isinstance(doc, dict):
        return "is not a YAML mapping, so the runner refuses to start"
    runner = doc.get("runner") or {}
    cache = doc.get("cache") or {}
    if not isinstance(runner, dict) or not isinstance(cache, dict):
        return "'runner' and 'cache' must be mappings, or the runner refuses to start"
    if runner.get("labels"):
        return (
            "sets runner.labels, which the runner registers and runs with instead of "
            "spec.labels (it ignores the labels it is given): remove runner.labels and set "
            "spec.labels"
        )
    state_file = runner.get("file")
    in_init = mode is RunnerMode.HOST or init_registers
    if in_init and state_file not in (None, "", DEFAULT_STATE_FILE):
        return (
            f"sets runner.file to {state_file!r}: the registration is written to "
            f"{DEFAULT_STATE_FILE!r} by the gro-register init container, so keep the default"
        )
    if (
        cache.get("enabled", True)
        and cache.get("external_server")
        and not cache.get("external_secret")
    ):
        return (
            "sets cache.external_server without cache.external_secret, so the runner refuses "
            "to start"
        )
    return None


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__

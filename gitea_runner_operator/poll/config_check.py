"""Refuses a group's ``spec.runnerConfig`` that the real runner would let override the group.

A runner config that sets the runner's labels, host mode's registration file, or that the
runner refuses to start with, gives runner Pods that start and never take a job: worse than a
condition saying why. Part of an observation, beside the CA bundle it reads through the same
ConfigMap reader; a config not seen before is parsed beside the event loop, once (a 64 KiB
one costs up to ~300 ms).
"""

from __future__ import annotations

from functools import partial

from gitea_runner_operator.api.observation import Problem
from gitea_runner_operator.api.runner_config import (
    VerdictKey,
    known_problem,
    parse_problem,
    registers_in_init,
    remember,
)
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.kit.offload import Offload
from gitea_runner_operator.kube.configmaps import ConfigReader, ReferenceProblem


class RunnerConfigCheck:
    def __init__(self, configs: ConfigReader) -> None:
        self._configs = configs
        self._parses: Offload[VerdictKey, str | None] = Offload("runner-config")

    async def require_usable(self, namespace: str, spec: RunnerGroupSpec) -> None:
        """Raises ReferenceProblem (``RunnerConfigInvalid``) for a config the group cannot
        run with, or when the ConfigMap key cannot be read."""
        ref = spec.runner_config
        if ref is None:
            return
        cm = ref.config_map_key_ref
        text = await self._configs.read_config_map_key(
            namespace, cm.name, cm.key, field="spec.runnerConfig", reason_prefix="RunnerConfig"
        )
        key, why = known_problem(text, spec.mode, init_registers=registers_in_init(spec))
        if key is not None:  # a config not seen before: parsed beside the loop, once
            why = remember(key, await self._parses.run(key, partial(parse_problem, text, key)))
        if why is not None:
            raise ReferenceProblem(
                Problem(
                    "RunnerConfigInvalid",
                    f"spec.runnerConfig: key {cm.key!r} of ConfigMap {namespace}/{cm.name} {why}",
                )
            )

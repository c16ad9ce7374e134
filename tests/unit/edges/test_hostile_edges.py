"""Generated hostile input at each edge a tenant reaches: its RunnerGroup spec, its Gitea's
job and runner answers, its Pods' and Jobs' metadata, its runnerConfig. Each edge either
refuses the input with the field named, or keeps at most a bounded number of bytes, and
returns within a generous time (a guard against hangs, not a performance claim)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitea_runner_operator.api import caps, runner_config
from gitea_runner_operator.api.forge import ForgejoJob
from gitea_runner_operator.api.gitea import ActionJob, ActionRunner, within_caps
from gitea_runner_operator.api.runner_config import runner_config_problem
from gitea_runner_operator.api.runnergroup import InvalidSpec, RunnerMode, parse_spec
from gitea_runner_operator.objects.slim import slim_group, slim_job, slim_pod
from tests.support.builders import VALID
from tests.support.deepsize import deep_size

HOSTILE = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# A guard against hangs: every edge here answers in milliseconds on inputs this size.
CPU_CEILING = 5.0

short = st.text(max_size=12)


@st.composite
def long_text(draw: st.DrawFn, most: int = 300_000) -> str:
    """A short generated piece repeated: large inputs without generating every character."""
    piece = draw(st.text(min_size=1, max_size=8))
    return piece * draw(st.integers(0, most // len(piece)))


def nested(depth: int, leaf: Any = "x") -> Any:
    value: Any = leaf
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | short,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(short, inner, max_size=6),
    max_leaves=40,
)
any_value = st.one_of(
    json_values,
    long_text(),
    st.integers(-(2**70), 2**70),
    st.integers(0, 50_000).map(lambda n: ["ubuntu"] * n),
    st.integers(0, 50_000).map(lambda n: [f"l{i}" for i in range(n)]),
    st.integers(0, 5_000).map(nested),
)
SPEC_FIELDS = [
    "scope", "org", "repo", "gitea", "labels", "labelSchemas", "maxActiveRunners", "image",
    "pollInterval", "idleTimeout", "startupTimeout", "drainTimeout", "minIdleRunners",
    "warmRunnerMaxAge", "webhook", "mode", "template", "runnerConfig", "maxRunnerLifetime",
    "retry", "terminationGracePeriod", "cache", "registrationToken", "authToken",
]  # fmt: skip


def timed(call: Any, *args: Any) -> Any:
    """This thread's CPU only: the process's would count threads earlier tests left running
    (a metrics render, an offloaded evaluation) against the call."""
    started = time.thread_time()
    try:
        return call(*args)
    finally:
        assert time.thread_time() - started < CPU_CEILING


@HOSTILE
@given(st.dictionaries(st.sampled_from(SPEC_FIELDS), any_value, min_size=1, max_size=4))
def test_a_hostile_spec_is_refused_naming_a_field_or_kept_small(changes):
    raw = {**VALID, **changes}
    try:
        spec = timed(parse_spec, raw)
    except InvalidSpec as exc:
        assert exc.message.startswith("spec")
        assert len(exc.message) < 64 * 1024  # the message never echoes the input whole
        return
    assert deep_size(spec) < 4 * 1024 * 1024


@HOSTILE
@given(st.integers(0, 3_000), st.sampled_from(["template", "cache"]))
def test_a_deep_object_in_the_spec_is_refused_without_a_recursion_error(depth, where):
    value: Any = nested(depth)
    raw = {**VALID, "template": {"spec": {"x": value}}}
    if where == "cache":
        raw = {**VALID, "cache": {"enabled": True, "resources": {"limits": value}}}
    try:
        timed(parse_spec, raw)
    except InvalidSpec as exc:
        assert exc.message.startswith(f"spec.{where}")


job_fields = st.fixed_dictionaries(
    {"id": st.integers(-(2**70), 2**70), "status": st.one_of(short, long_text(1000))},
    optional={
        "labels": st.one_of(
            st.integers(0, 20_000).map(lambda n: ["ab"] * n),
            st.lists(long_text(2_000), max_size=4),
        ),
        "url": long_text(600_000),
        "name": long_text(),
        "runner_name": long_text(),
        "handle": long_text(),
        "run_id": st.integers(-(2**70), 2**70),
    },
)
# What one kept job may hold at most: its labels, its URL, its names, its handle.
JOB_MAX_BYTES = 2 * (
    caps.JOB_LABELS_MAX * (caps.JOB_LABEL_MAX_CHARS * 4 + 100)
    + caps.JOB_URL_MAX_CHARS * 4
    + 2 * caps.ANSWER_NAME_MAX_CHARS * 4
    + caps.HANDLE_MAX_CHARS * 4
    + 4096
)


@HOSTILE
@given(st.lists(job_fields, min_size=1, max_size=5))
def test_a_hostile_job_list_keeps_jobs_within_their_caps(entries):
    kept, refused = timed(within_caps, ActionJob, entries)
    assert len(kept) + len(refused) == len(entries)
    for job in kept:
        assert deep_size(job) < JOB_MAX_BYTES
    fields = {"id", "run_id", "status", "labels", "url", "name", "runner_name", "handle"}
    for cause in refused:
        assert cause.split(":")[0].split(".")[0] in fields


forgejo_job_fields = st.fixed_dictionaries(
    {"id": st.integers(-(2**70), 2**70), "status": st.sampled_from(["waiting", "running"])},
    optional={
        "runs_on": st.integers(0, 20_000).map(lambda n: ["ab"] * n),
        "needs": st.integers(0, 20_000).map(lambda n: ["job"] * n),
        "name": long_text(),
        "handle": long_text(),
        "repo_id": st.integers(-(2**70), 2**70),
    },
)


@HOSTILE
@given(st.lists(forgejo_job_fields, min_size=1, max_size=5))
def test_a_hostile_forgejo_job_list_keeps_jobs_within_their_caps(entries):
    kept, refused = timed(within_caps, ForgejoJob, entries)
    assert len(kept) + len(refused) == len(entries)
    for job in kept:
        assert deep_size(job) < JOB_MAX_BYTES


@HOSTILE
@given(st.integers(0, 20_000), long_text(100_000))
def test_a_hostile_runner_list_keeps_runners_within_their_caps(count, name):
    entries = [{"id": 1, "name": name, "labels": [{"name": "l"}] * count}]
    kept, refused = timed(within_caps, ActionRunner, entries)
    assert len(kept) + len(refused) == 1
    for runner in kept:
        assert len(runner.labels) <= caps.RUNNER_LABELS_MAX
        assert len(runner.name) <= caps.ANSWER_NAME_MAX_CHARS


metadata_maps = st.dictionaries(
    st.one_of(short, short.map(lambda s: f"gitea.bpg.pw/{s}")),
    st.one_of(short, long_text(300_000)),
    max_size=20,
).flatmap(
    lambda extra: st.integers(0, 5_000).map(
        lambda n: {**extra, **{f"gitea.bpg.pw/k{i}": "v" for i in range(n)}}
    )
)
# The allow-list's keys, each value within its cap, and an identity of Kubernetes' sizes.
KEPT_METADATA_BYTES = 10 * (caps.KEPT_VALUE_MAX_CHARS + 100) + 8 * 1024


@HOSTILE
@given(metadata_maps, metadata_maps, st.sampled_from([slim_pod, slim_job, slim_group]))
def test_hostile_pod_and_job_metadata_is_kept_small(labels, annotations, slim):
    obj = {
        "metadata": {
            "name": "ci-1-x",
            "namespace": "team-a",
            "uid": "u",
            "labels": labels,
            "annotations": annotations,
        },
        "status": {"phase": "Running"},
    }
    kept = timed(slim, obj)
    assert len(json.dumps(kept["metadata"])) < KEPT_METADATA_BYTES


yaml_texts = st.one_of(
    long_text(200_000),
    st.integers(0, 100_000).map(lambda n: "a: " + "[" * n + "]" * n),
    st.integers(0, 2_000).map(lambda n: "".join(f"{'  ' * i}k{i}:\n" for i in range(n))),
    st.integers(0, 20_000).map(lambda n: "a: &a [x]\n" + "".join(f"b{i}: *a\n" for i in range(n))),
    st.text(max_size=200),
)


@pytest.fixture(autouse=True)
def fresh_verdicts():
    runner_config.VERDICTS.clear()


@HOSTILE
@given(yaml_texts, st.sampled_from(list(RunnerMode)))
def test_a_hostile_runner_config_gets_a_verdict_in_bounded_time(text, mode):
    verdict = timed(runner_config_problem, text, mode)
    assert verdict is None or isinstance(verdict, str)
    if len(text.encode()) > caps.RUNNER_CONFIG_MAX_BYTES:
        assert verdict is not None and str(caps.RUNNER_CONFIG_MAX_BYTES) in verdict
    assert len(runner_config.VERDICTS) <= caps.RUNNER_CONFIG_VERDICTS


@pytest.mark.parametrize("field", ["scope", "org", "labels", "maxActiveRunners", "gitea"])
def test_any_field_nested_thousands_deep_is_refused_naming_it(field):
    # Hypothesis found it: `scope` as a list nested 1,987 deep made pydantic's enum error
    # recurse past the limit, a RecursionError instead of a refusal naming the field.
    with pytest.raises(InvalidSpec) as refused:
        parse_spec({**VALID, field: nested(3_000)})
    assert refused.value.message.startswith(f"spec.{field}: nests deeper than")

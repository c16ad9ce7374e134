"""The Argo CD health check the chart ships (files/argocd-health.lua), run by a real Lua 5.1
interpreter (Argo CD's gopher-lua speaks 5.1) against the RunnerGroup objects the real
reconciler writes: a person looking at Argo CD must see Healthy, Progressing or Degraded, with
the operator's own words, in each case a GitOps change can lead to."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lupa import lua51  # the test extra (pyproject.toml)

from gitea_runner_operator.api.observation import Problem
from gitea_runner_operator.reconcile.status.conditions import STALL_GRACE
from tests.support.builders import VALID
from tests.support.fake_cluster import snapshot
from tests.support.gitops import HOST_PATH, MISSING, World, group, kstatus

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "charts" / "gitea-runner-operator" / "files" / "argocd-health.lua"
KEY = "resource.customizations.health.gitea.bpg.pw_RunnerGroup"


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """What Argo CD shows for ``obj``: the script runs with ``obj`` as a global, as there."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    hs = lua.execute(SCRIPT.read_text())
    return str(hs["status"]), str(hs["message"] or "")


async def test_a_healthy_group_is_healthy():
    world = World(snapshot(queued=2))
    await world.pass_after(1)
    status, message = health(group(world))
    assert status == "Healthy"
    assert message.startswith("Polling: 2 matching jobs queued")


async def test_a_group_with_no_status_yet_is_progressing():
    world = World(None)
    assert health(group(world))[0] == "Progressing"


def test_a_group_with_the_crds_default_status_is_progressing():
    """What the API server serves before the operator's first write (the CRD's default)."""
    fresh = {"metadata": {"generation": 1}, "status": {"observedGeneration": 0}}
    assert health(fresh) == ("Progressing", "Waiting for the operator to apply generation 1")


async def test_a_new_generation_is_progressing_until_it_is_ready():
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    world.edit(maxActiveRunners=5)
    # Before the operator has seen the edit at all: the generation is not observed.
    assert health(group(world)) == (
        "Progressing",
        "Waiting for the operator to apply generation 2",
    )
    world.sources.source.latest = None
    await world.pass_after(2)
    status, message = health(group(world))
    assert status == "Progressing" and "generation 2 is being applied" in message
    world.sources.source.latest = snapshot(queued=0, started_at=50.0)
    await world.pass_after(2)
    assert health(group(world))[0] == "Healthy"


async def test_an_invalid_spec_is_degraded_with_the_field_at_fault():
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    world.edit(maxActiveRunners=-1)
    await world.pass_after(2)
    status, message = health(group(world))
    assert status == "Degraded"
    assert message.startswith("InvalidSpec: ") and "maxActiveRunners" in message


async def test_a_refused_template_is_degraded():
    world = World(snapshot(queued=0), spec={**VALID, "template": HOST_PATH})
    await world.pass_after(1)
    status, message = health(group(world))
    assert status == "Degraded" and message.startswith("TemplateNotAllowed: ")
    assert "hostPath" in message


async def test_a_missing_secret_is_progressing_within_the_grace_then_degraded():
    world = World(snapshot(problem=MISSING))
    await world.pass_after(1)
    status, message = health(group(world))
    assert status == "Progressing" and message.startswith("SecretNotFound: ")
    await world.pass_after(STALL_GRACE)
    status, message = health(group(world))
    assert status == "Degraded"
    assert message == "SecretNotFound: spec.authToken.secretRef: Secret team-a/tokens not found"


async def test_gitea_failing_a_working_group_is_degraded_with_gitea_s_error():
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    world.sources.source.latest = snapshot(problem=Problem("GiteaUnreachable", "connect refused"))
    await world.pass_after(2)
    assert health(group(world)) == ("Degraded", "GiteaUnreachable: connect refused")


async def test_argo_cd_and_kstatus_agree_on_every_case():
    """Current is Healthy, InProgress is Progressing, Failed is Degraded: a platform that
    runs both tools sees one answer."""
    seen = set()
    for build in (healthy, applying, invalid, secret_within_grace, secret_past_grace):
        obj = await build()
        verdict = {"Current": "Healthy", "InProgress": "Progressing", "Failed": "Degraded"}
        assert health(obj)[0] == verdict[kstatus(obj)], obj["status"]
        seen.add(kstatus(obj))
    assert seen == {"Current", "InProgress", "Failed"}


async def healthy() -> dict[str, Any]:
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    return group(world)


async def applying() -> dict[str, Any]:
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    world.edit(maxActiveRunners=5)
    world.sources.source.latest = None
    await world.pass_after(2)
    return group(world)


async def invalid() -> dict[str, Any]:
    world = World(snapshot(queued=0), spec={**VALID, "maxActiveRunners": -1})
    await world.pass_after(1)
    return group(world)


async def secret_within_grace() -> dict[str, Any]:
    world = World(snapshot(problem=MISSING))
    await world.pass_after(1)
    return group(world)


async def secret_past_grace() -> dict[str, Any]:
    world = World(snapshot(problem=MISSING))
    await world.pass_after(1)
    await world.pass_after(STALL_GRACE)
    return group(world)


def test_the_docs_and_the_chart_ship_the_same_script():
    """docs/gitops.md shows the argocd-cm key with the script; the chart's ConfigMap
    carries the file itself. One script, not two that drift."""
    docs = (REPO / "docs" / "gitops.md").read_text()
    block = re.search(rf"  {re.escape(KEY)}: \|\n((?:    .*\n|\n)+)", docs)
    assert block, f"docs/gitops.md shows no {KEY} block"
    shown = "\n".join(line[4:] for line in block.group(1).splitlines()).strip()
    assert shown == SCRIPT.read_text().strip()
    template = REPO / "charts" / "gitea-runner-operator" / "templates"
    text = (template / "argocd-health-configmap.yaml").read_text()
    assert KEY in text and 'Files.Get "files/argocd-health.lua"' in text

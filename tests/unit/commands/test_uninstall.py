"""helm uninstall and a namespace deleted after the operator: the groups' finalizer never
keeps anything for ever (gitea_runner_operator/commands/uninstall.py)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator import cli
from gitea_runner_operator.commands import uninstall
from gitea_runner_operator.objects.views import parse_time
from gitea_runner_operator.reconcile.reconciler import FINALIZER


class FakeGroups:
    """RunnerGroups as the API server keeps them; ``operator_releases`` says whether an
    operator is still there to finish the teardown of deleted groups."""

    def __init__(self, *names: str, operator_releases: bool = True, conflicts: int = 0) -> None:
        self.items = {
            ("team", n): {"metadata": {"namespace": "team", "name": n, "resourceVersion": "1",
                                       "finalizers": [FINALIZER, "other/keep"]}}
            for n in names
        }  # fmt: skip
        self.deleting: set[tuple[str, str]] = set()
        self.operator_releases = operator_releases
        self.conflicts = conflicts
        self.journal: list[tuple[Any, ...]] = []
        self.detached: set[tuple[str, str]] = set()

    async def find(self, namespace: str | None) -> list[dict[str, Any]]:
        if self.operator_releases:
            for key in list(self.deleting):
                self.items.pop(key, None)
            for key in self.detached:  # torn down and let go, left in place
                meta = self.items[key]["metadata"]
                meta["finalizers"] = [f for f in meta["finalizers"] if f != FINALIZER]
        return [g for (ns, _), g in self.items.items() if namespace in (None, ns)]

    async def delete(self, namespace: str, name: str) -> None:
        self.deleting.add((namespace, name))

    async def annotate(self, namespace: str, name: str, annotations: dict[str, Any]) -> None:
        meta = self.items[(namespace, name)]["metadata"]
        merged = {**(meta.get("annotations") or {}), **annotations}
        meta["annotations"] = {k: v for k, v in merged.items() if v is not None}
        self.journal.append(("annotate", name, tuple(sorted(annotations.items()))))
        if any(annotations.values()):
            self.detached.add((namespace, name))

    async def set_finalizers(self, namespace: str, name: str, finalizers: list[str], rv: str):
        if self.conflicts:
            self.conflicts -= 1
            raise ApiException(status=409)
        self.items[(namespace, name)]["metadata"]["finalizers"] = finalizers


async def test_drain_deletes_every_group_and_waits_for_the_operators_teardown():
    groups = FakeGroups("a", "b")
    deleted, forced = await uninstall.drain(groups, None, wait_seconds=5, poll=0.01)
    assert deleted == ["team/a", "team/b"] and forced == []
    assert groups.items == {}


async def test_drain_releases_what_the_operator_did_not_tear_down_within_the_timeout():
    groups = FakeGroups("a", operator_releases=False)
    deleted, forced = await uninstall.drain(groups, "team", wait_seconds=0.05, poll=0.01)
    assert deleted == forced == ["team/a"]
    # only our finalizer goes: someone else's stays theirs
    assert groups.items[("team", "a")]["metadata"]["finalizers"] == ["other/keep"]


async def test_release_finalizers_reads_again_after_a_conflict_and_skips_released_groups():
    groups = FakeGroups("a", "b", operator_releases=False, conflicts=1)
    assert sorted(await uninstall.release(groups, None)) == ["team/a", "team/b"]
    assert await uninstall.release(groups, None) == []


def test_the_operator_command_dispatches_the_subcommands(monkeypatch):
    seen: list[list[str]] = []
    monkeypatch.setattr(uninstall, "main", lambda argv: seen.append(list(argv)) or 0)
    assert cli.main(["release-finalizers", "--namespace", "x"]) == 0
    assert seen == [["release-finalizers", "--namespace", "x"]]
    args = uninstall.build_parser().parse_args(["drain-groups", "--timeout", "30"])
    assert (args.timeout, args.namespace, args.kubeconfig) == (30.0, [], None)


class FakeOperator:
    def __init__(self, groups: FakeGroups, pods: int = 2, stops: bool = True) -> None:
        self.groups, self.pods, self.stops = groups, pods, stops

    async def scale_to_zero(self) -> None:
        self.groups.journal.append(("scale to zero",))
        if self.stops:
            self.pods = 0

    async def pods_left(self) -> int:
        return self.pods


def _annotations(groups: FakeGroups, name: str) -> dict[str, str]:
    return dict(groups.items[("team", name)]["metadata"].get("annotations") or {})


async def test_detach_leaves_the_groups_and_takes_its_marks_off_only_once_the_operator_is_gone():
    groups = FakeGroups("a", "b")
    operator = FakeOperator(groups)
    assert await uninstall.run_detach(groups, operator, [None], 5) == 0
    # no group deleted; each released by the operator, then unmarked after the stop
    assert groups.deleting == set() and sorted(groups.items) == [("team", "a"), ("team", "b")]
    for name in ("a", "b"):
        assert groups.items[("team", name)]["metadata"]["finalizers"] == ["other/keep"]
        assert _annotations(groups, name) == {}
    steps = [entry[0] for entry in groups.journal]
    assert steps == ["annotate", "annotate", "scale to zero", "annotate", "annotate"]
    # the mark outlives the hook's wait, so the operator cannot take a group back meanwhile
    (_, _, mark), *_ = groups.journal
    since, until = (parse_time(v) for _, v in sorted(mark))
    assert until - since == 5 + uninstall.MARK_MARGIN


async def test_detach_releases_what_the_operator_did_not_and_keeps_marks_on_a_running_operator():
    groups = FakeGroups("a", operator_releases=False)
    operator = FakeOperator(groups, stops=False)
    monkey_stop = uninstall.STOP_SECONDS
    uninstall.STOP_SECONDS = 0.05
    try:
        marked, forced = await uninstall.detach(groups, ["team"], wait_seconds=0.05, poll=0.01)
        assert marked == forced == ["team/a"]
        assert groups.items[("team", "a")]["metadata"]["finalizers"] == ["other/keep"]
        assert await uninstall.run_detach(groups, operator, ["team"], 0.05) == 0
    finally:
        uninstall.STOP_SECONDS = monkey_stop
    # a Pod still running would take the group back: the mark stays, to run out by itself
    assert set(_annotations(groups, "a")) == {
        "gitea.bpg.pw/detach-since",
        "gitea.bpg.pw/detach-until",
    }


async def test_a_group_applied_again_during_the_detach_is_marked_too():
    """A GitOps tool applying a group the operator then takes on (its finalizer): the hook
    marks it at its next look, and the operator lets it go as well."""
    groups = FakeGroups("a")
    found = groups.find

    async def find_then_reapply(namespace: str | None) -> list[dict[str, Any]]:
        out = await found(namespace)
        if ("team", "late") not in groups.items:
            late = {"namespace": "team", "name": "late", "finalizers": [FINALIZER]}
            groups.items[("team", "late")] = {"metadata": late}
        return out

    groups.find = find_then_reapply  # type: ignore[method-assign]
    marked, forced = await uninstall.detach(groups, [None], wait_seconds=1, poll=0.01)
    assert marked == ["team/a", "team/late"] and forced == []
    assert groups.items[("team", "late")]["metadata"]["finalizers"] == []

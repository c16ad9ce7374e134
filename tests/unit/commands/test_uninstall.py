"""helm uninstall and a namespace deleted after the operator: the groups' finalizer never
keeps anything for ever (gitea_runner_operator/commands/uninstall.py)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator import cli
from gitea_runner_operator.commands import uninstall
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

    async def find(self, namespace: str | None) -> list[dict[str, Any]]:
        if self.operator_releases:
            for key in list(self.deleting):
                self.items.pop(key, None)
        return [g for (ns, _), g in self.items.items() if namespace in (None, ns)]

    async def delete(self, namespace: str, name: str) -> None:
        self.deleting.add((namespace, name))

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

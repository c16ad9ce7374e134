"""Taking the operator away without leaving a RunnerGroup, a runner or a namespace stuck.

Every RunnerGroup carries the operator's teardown finalizer, so a group deleted while no
operator runs (and with it its namespace) would wait for ever. Two subcommands, run with
the operator's image and credentials:

``drain-groups`` is what the Helm chart's pre-delete hook runs, while the operator is still
there: it deletes every RunnerGroup in scope and waits until the operator's teardown has
released them all (idle runners and their registrations go at once; a busy runner finishes
its job within the group's ``drainTimeout``, then goes). After ``--timeout`` it removes the
finalizer from the groups still held, naming them, so the uninstall always completes; their
runner Jobs then go with them (owner references), a busy runner's job is cancelled and its
registration may stay in Gitea as an offline runner.

``detach-groups`` is what the hook runs by default instead: it leaves the groups in place
for the next install, the way Kubernetes controllers leave their custom resources. It marks
every group in scope (api/detach.py: two annotations, never the spec) and waits until the
still running operator has torn each one down as if deleted and released its finalizer;
after ``--timeout`` it removes the finalizer of the groups still held (their runner Jobs
stay, the next install adopts them). Then it scales the operator's Deployment to zero and,
once no operator Pod is left to take the groups back, removes the marks, so the next
install serves them at once. A mark the hook could not remove runs out by itself.

``release-finalizers`` is the way out once the operator is already gone (uninstalled
without its hook, scaled to zero, its namespace deleted first): it removes the finalizer
from every RunnerGroup in scope at once, so their namespaces finish terminating. Nothing is
cleaned in Gitea then: the groups' offline registrations stay until an admin removes them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.detach import ANNOTATIONS as DETACH_ANNOTATIONS
from gitea_runner_operator.api.detach import marks as detach_marks
from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.kube.clients import api_client
from gitea_runner_operator.kube.http import MERGE_PATCH
from gitea_runner_operator.reconcile.steps.teardown import FINALIZER

# The two subcommands, each with the line that the parsers' --help shows for it.
COMMANDS = {
    "drain-groups": "delete the RunnerGroups and wait for their teardown",
    "detach-groups": "deregister the groups' runners and leave the groups for the next install",
    "release-finalizers": "remove the finalizer of groups whose operator is gone",
}
# Past the hook's own wait, how long the operator gets to stop before the marks come off.
STOP_SECONDS = 60.0
# A mark outlives the hook's wait by this much (api/detach.py): it must hold while the
# operator is being stopped, and no longer than that if the hook dies half-way.
MARK_MARGIN = STOP_SECONDS + 60.0


class Groups(Protocol):
    """What the subcommands need of the API server (a fake in the unit tests)."""

    async def find(self, namespace: str | None) -> list[dict[str, Any]]: ...
    async def delete(self, namespace: str, name: str) -> None: ...
    async def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None: ...
    async def annotate(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None: ...


class Operator(Protocol):
    """The operator's Deployment, as ``detach-groups`` stops it (a fake in the unit tests)."""

    async def scale_to_zero(self) -> None: ...
    async def pods_left(self) -> int: ...


class KubeGroups:
    """:class:`Groups` over kubernetes_asyncio's CustomObjectsApi."""

    def __init__(self, api: client.CustomObjectsApi) -> None:
        self._api = api

    async def find(self, namespace: str | None) -> list[dict[str, Any]]:
        args = (constants.GROUP, constants.VERSION)
        if namespace:
            out = await self._api.list_namespaced_custom_object(*args, namespace, constants.PLURAL)
        else:
            out = await self._api.list_cluster_custom_object(*args, constants.PLURAL)
        return list(out.get("items") or [])

    async def delete(self, namespace: str, name: str) -> None:
        try:
            await self._api.delete_namespaced_custom_object(
                constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None:
        meta = {"finalizers": finalizers, "resourceVersion": resource_version}
        await self._patch_meta(namespace, name, meta)

    async def annotate(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        await self._patch_meta(namespace, name, {"annotations": annotations})

    async def _patch_meta(self, namespace: str, name: str, meta: dict[str, Any]) -> None:
        """A merge patch of the group's metadata; a group gone meanwhile needs nothing."""
        try:
            await self._api.patch_namespaced_custom_object(
                constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name,
                {"metadata": meta}, _content_type=MERGE_PATCH,  # type: ignore[call-arg]
            )  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:
                raise


class KubeOperator:
    """:class:`Operator` over the apps and core APIs: one Deployment, by name."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self._apps, self._core = client.AppsV1Api(api), client.CoreV1Api(api)
        self._namespace, self._name = namespace, name
        self._selector = ""

    async def scale_to_zero(self) -> None:
        deployment = await self._apps.read_namespaced_deployment(self._name, self._namespace)
        labels = deployment.spec.selector.match_labels or {}
        self._selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        body = {"spec": {"replicas": 0}}
        await self._apps.patch_namespaced_deployment(
            self._name, self._namespace, body,
            _content_type=MERGE_PATCH,  # type: ignore[call-arg]
        )  # fmt: skip

    async def pods_left(self) -> int:
        pods = await self._core.list_namespaced_pod(self._namespace, label_selector=self._selector)
        return len(pods.items)


async def release(groups: Groups, namespace: str | None) -> list[str]:
    """Remove our finalizer from every group in scope; returns the groups released."""
    released = []
    for _attempt in range(5):  # a 409 (changed meanwhile) means read again
        conflict = False
        for g in await groups.find(namespace):
            meta = g["metadata"]
            finalizers = list(meta.get("finalizers") or [])
            if FINALIZER not in finalizers:
                continue
            rest = [f for f in finalizers if f != FINALIZER]
            try:
                await groups.set_finalizers(
                    meta["namespace"], meta["name"], rest, meta.get("resourceVersion", "")
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise
                conflict = True
                continue
            released.append(str(GroupKey.of(g)))
        if not conflict:
            break
    return released


async def drain(
    groups: Groups, namespace: str | None, wait_seconds: float, poll: float = 2.0
) -> tuple[list[str], list[str]]:
    """Delete every group in scope and wait for the operator to release them; after
    ``wait_seconds`` release the rest. Returns (deleted, released by force)."""
    deleted = [str(GroupKey.of(g)) for g in await groups.find(namespace)]
    for key in deleted:
        ns, name = GroupKey.parse(key)
        await groups.delete(ns, name)
    deadline = time.monotonic() + wait_seconds
    while await groups.find(namespace):
        if time.monotonic() >= deadline:
            return deleted, await release(groups, namespace)
        await asyncio.sleep(poll)
    return deleted, []


def _held(group: dict[str, Any]) -> bool:
    return FINALIZER in (group["metadata"].get("finalizers") or [])


async def detach(
    groups: Groups,
    namespaces: Sequence[str | None],
    wait_seconds: float,
    poll: float = 2.0,
    wall_clock: Callable[[], float] = time.time,
) -> tuple[list[str], list[str]]:
    """Mark every group in scope and wait for the operator to release them; after
    ``wait_seconds`` release the rest. A group that turns up meanwhile (a GitOps tool
    applying it again) is marked too. Returns (marked, released by force)."""
    since = wall_clock()
    mark = dict(detach_marks(since, since + wait_seconds + MARK_MARGIN))
    marked: list[str] = []
    deadline = time.monotonic() + wait_seconds
    while True:
        held = []
        for ns in namespaces:
            for g in await groups.find(ns):
                key = str(GroupKey.of(g))
                if key not in marked:
                    await groups.annotate(*GroupKey.parse(key), dict(mark))
                    marked.append(key)
                if _held(g):
                    held.append(key)
        if not held:
            return marked, []
        if time.monotonic() >= deadline:
            forced = [k for ns in namespaces for k in await release(groups, ns)]
            return marked, forced
        await asyncio.sleep(poll)


async def stop_operator(operator: Operator, wait_seconds: float, poll: float = 1.0) -> bool:
    """Scale the operator to zero and wait until none of its Pods is left (a terminating
    one still reconciles): whether it stopped in time."""
    await operator.scale_to_zero()
    deadline = time.monotonic() + wait_seconds
    while await operator.pods_left():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(poll)
    return True


async def unmark(groups: Groups, namespaces: Sequence[str | None]) -> list[str]:
    """Take the detach marks off, for the next install to serve the groups at once; and
    release any group the operator took back between its last pass and its stop."""
    cleared = []
    removal: dict[str, str | None] = dict.fromkeys(DETACH_ANNOTATIONS)
    for ns in namespaces:
        for g in await groups.find(ns):
            annotations = g["metadata"].get("annotations") or {}
            if any(a in annotations for a in DETACH_ANNOTATIONS):
                await groups.annotate(*GroupKey.parse(str(GroupKey.of(g))), dict(removal))
                cleared.append(str(GroupKey.of(g)))
        await release(groups, ns)
    return cleared


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gitea-runner-operator", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("drain-groups", help=COMMANDS["drain-groups"])
    d.add_argument("--timeout", type=float, default=270.0,
                   help="seconds to wait for the operator's teardown (default 270)")  # fmt: skip
    k = sub.add_parser("detach-groups", help=COMMANDS["detach-groups"])
    k.add_argument("--timeout", type=float, default=270.0,
                   help="seconds to wait for the operator's teardown (default 270)")  # fmt: skip
    k.add_argument("--deployment", required=True,
                   help="the operator's Deployment, stopped before the marks come off")  # fmt: skip
    k.add_argument("--deployment-namespace", required=True,
                   help="the namespace of that Deployment (the release's)")  # fmt: skip
    r = sub.add_parser("release-finalizers", help=COMMANDS["release-finalizers"])
    for s in (d, k, r):
        s.add_argument("--namespace", action="append", default=[],
                       help="only here (repeatable); default every namespace")  # fmt: skip
        s.add_argument("--kubeconfig", default=None)
    return p


async def run(args: argparse.Namespace) -> int:
    if args.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(config_file=args.kubeconfig)
    async with api_client() as api:
        groups = KubeGroups(client.CustomObjectsApi(api))
        if args.command == "detach-groups":
            operator = KubeOperator(api, args.deployment_namespace, args.deployment)
            return await run_detach(groups, operator, args.namespace or [None], args.timeout)
        for ns in args.namespace or [None]:
            if args.command == "release-finalizers":
                for key in await release(groups, ns):
                    print(f"released the finalizer of RunnerGroup {key}", flush=True)
                continue
            deleted, forced = await drain(groups, ns, args.timeout)
            print(f"deleted {len(deleted)} RunnerGroup(s): {', '.join(deleted)}", flush=True)
            _say_forced(forced, args.timeout, "its runners go with it")
    return 0


def _say_forced(forced: Sequence[str], waited: float, then: str) -> None:
    """One line per group whose finalizer was removed before its teardown was done."""
    for key in forced:
        print(
            f"RunnerGroup {key}: teardown not done after {waited:.0f}s; finalizer removed ({then})",
            flush=True,
        )


async def run_detach(
    groups: Groups, operator: Operator, namespaces: Sequence[str | None], wait_seconds: float
) -> int:
    marked, forced = await detach(groups, namespaces, wait_seconds)
    print(f"detached {len(marked)} RunnerGroup(s): {', '.join(marked)}", flush=True)
    _say_forced(forced, wait_seconds, "its runner Jobs stay for the next install")
    if not await stop_operator(operator, STOP_SECONDS):
        # Taking the marks off now would let a Pod still running take the groups back;
        # left on, they run out by themselves (api/detach.py).
        print(
            f"the operator did not stop within {STOP_SECONDS:.0f}s; marks left to run out",
            flush=True,
        )
        return 0
    cleared = await unmark(groups, namespaces)
    print(f"operator stopped; marks removed from {len(cleared)} RunnerGroup(s)", flush=True)
    return 0


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(run(args))
    except ApiException as exc:
        print(f"{args.command} failed: HTTP {exc.status} {exc.reason}", file=sys.stderr)
        return 1

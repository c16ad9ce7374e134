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
from collections.abc import Sequence
from typing import Any, Protocol

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.kube.http import MERGE_PATCH
from gitea_runner_operator.reconcile.steps.teardown import FINALIZER

# The two subcommands, each with the line that the parsers' --help shows for it.
COMMANDS = {
    "drain-groups": "delete the RunnerGroups and wait for their teardown",
    "release-finalizers": "remove the finalizer of groups whose operator is gone",
}


class Groups(Protocol):
    """What the subcommands need of the API server (a fake in the unit tests)."""

    async def find(self, namespace: str | None) -> list[dict[str, Any]]: ...
    async def delete(self, namespace: str, name: str) -> None: ...
    async def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None: ...


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
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}}
        try:
            await self._api.patch_namespaced_custom_object(
                constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name, body,
                _content_type=MERGE_PATCH,  # type: ignore[call-arg]
            )  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:  # gone meanwhile: nothing left to release
                raise


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gitea-runner-operator", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("drain-groups", help=COMMANDS["drain-groups"])
    d.add_argument("--timeout", type=float, default=270.0,
                   help="seconds to wait for the operator's teardown (default 270)")  # fmt: skip
    r = sub.add_parser("release-finalizers", help=COMMANDS["release-finalizers"])
    for s in (d, r):
        s.add_argument("--namespace", action="append", default=[],
                       help="only here (repeatable); default every namespace")  # fmt: skip
        s.add_argument("--kubeconfig", default=None)
    return p


async def run(args: argparse.Namespace) -> int:
    if args.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(config_file=args.kubeconfig)
    async with client.ApiClient() as api:
        groups = KubeGroups(client.CustomObjectsApi(api))
        for ns in args.namespace or [None]:
            if args.command == "release-finalizers":
                for key in await release(groups, ns):
                    print(f"released the finalizer of RunnerGroup {key}", flush=True)
                continue
            deleted, forced = await drain(groups, ns, args.timeout)
            print(f"deleted {len(deleted)} RunnerGroup(s): {', '.join(deleted)}", flush=True)
            for key in forced:
                print(
                    f"RunnerGroup {key}: teardown not done after {args.timeout:.0f}s; "
                    "finalizer removed (its runners go with it)",
                    flush=True,
                )
    return 0


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(run(args))
    except ApiException as exc:
        print(f"{args.command} failed: HTTP {exc.status} {exc.reason}", file=sys.stderr)
        return 1

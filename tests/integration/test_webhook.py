"""The webhook receiver against real Gitea deliveries: Gitea (the testbed's, with
``[webhook] ALLOWED_HOST_LIST=loopback``) signs and delivers ``workflow_job`` events to the
receiver on 127.0.0.1, and the per-group secrets come from real Secrets read with the
operator's own ServiceAccount."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, config

from gitea_runner_operator.api.credentials import CREDENTIALS_LABEL
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.hooks import HookClient
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kube.secret_store import SecretStore
from gitea_runner_operator.webhook import (
    CachedSecretReader,
    Descriptors,
    GroupDescriptor,
    WebhookServer,
)
from tests.support import manifests
from tests.support.builders import workflow
from tests.support.launcher import OPERATOR_NS, OPERATOR_SA, free_port
from tests.support.testbed import (
    GROUPS,
    GiteaTarget,
    group_status,
    make_secret,
    make_tokens,
    runner_group,
    runner_jobs,
    wait_until,
)
from tests.support.webhook import FakeOperator
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.kube import KubeClient

pytestmark = pytest.mark.integration

# One job that is queued at once, and one held by needs: (delivered as "waiting").
WORKFLOW = workflow("ci", dict.fromkeys(["build", "after"], "gro-linux"), needs={"after": "build"})


def labelled_secret(kube: KubeClient, ns: str, name: str, value: str, labelled: bool) -> None:
    labels = {CREDENTIALS_LABEL: "true"} if labelled else {}
    manifests.apply(
        kube,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "labels": labels},
            "type": "Opaque",
            "stringData": {"secret": value},
        },
        namespace=ns,
    )


@pytest.fixture
def webhook_target(gitea: GiteaAPI) -> Any:
    """An organisation and repository of their own, with the organisation's real runner
    registration token: a group given an empty one reads SecretKeyMissing and serves
    nothing, which a test would only see as a delivery that never came."""
    org, repo = f"hooks-{secrets.token_hex(3)}", "app"
    gitea.create_org(org)
    gitea.create_repo(org, repo)
    token = gitea.registration_token("org", owner=org)
    if not token:
        raise RuntimeError(f"Gitea gave an empty runner registration token for org {org}")
    target = GiteaTarget(org=org, repo=repo, registration_token=token)
    yield target
    with contextlib.suppress(Exception):
        gitea.delete(f"/repos/{target.org}/{target.repo}")
    with contextlib.suppress(Exception):
        gitea.delete(f"/orgs/{target.org}")


async def test_real_deliveries_wake_exactly_the_groups_their_secret_speaks_for(
    cluster: Any,
    kube: KubeClient,
    gitea: GiteaAPI,
    team_namespace: str,
    webhook_target: Any,
    tmp_path: Any,
) -> None:
    ns, org, repo = team_namespace, webhook_target.org, webhook_target.repo
    team_secret, unlabelled_secret, operator_secret = (secrets.token_hex(16) for _ in range(3))
    labelled_secret(kube, ns, "hook", team_secret, labelled=True)
    labelled_secret(kube, ns, "hook-unlabelled", unlabelled_secret, labelled=False)
    make_secret(kube, ns, "tokens", {"registration": "unused", "api": "unused"})

    def group(name: str, **spec: Any) -> dict[str, Any]:
        obj = runner_group(name, target=webhook_target, url=cluster.gitea_url, **spec)
        obj["spec"] = {k: v for k, v in obj["spec"].items() if v is not None}
        # The API server accepts spec.webhook (CRD schema) and returns it as stored.
        return kube.post(GROUPS.format(ns=ns), obj)

    objects = [
        group("mine", webhook={"secretRef": {"name": "hook", "key": "secret"}}),
        group("gpu", labels=["gro-gpu"], webhook={"secretRef": {"name": "hook", "key": "secret"}}),
        group("unlabelled", webhook={"secretRef": {"name": "hook-unlabelled", "key": "secret"}}),
        group("no-hook"),  # woken only by the operator-wide secret
        group("global", scope="global", org=None),
    ]
    assert objects[0]["spec"]["webhook"] == {
        "secretRef": {"name": "hook", "key": "secret"},
        "manageHook": False,  # the schema's defaults
        "pollInterval": "5m",
    }

    woken: list[str] = []
    outcomes: list[str] = []
    all_delivered = asyncio.Event()

    def on_delivery(outcome: str) -> None:
        outcomes.append(outcome)
        if len(outcomes) >= 8:
            all_delivered.set()

    descriptors = Descriptors()
    sa_token = kube.create_token(OPERATOR_NS, OPERATOR_SA)
    kubeconfig = cluster.kubeconfig_for_token(sa_token, tmp_path / "kubeconfig")
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    hooks: list[str] = []
    async with client.ApiClient(cfg) as api:
        server = WebhookServer(
            "127.0.0.1",
            0,
            FakeOperator(
                lambda: descriptors.of(objects),
                on_wake=woken.append,
                secret_provider=CachedSecretReader(SecretStore(api)),
                on_delivered=on_delivery,
            ),
            operator_secret=operator_secret.encode(),
        )
        await server.start()
        try:
            url = f"http://127.0.0.1:{server.port}/hooks/gitea"

            def add_hook(secret: str, repo_hook: bool = False) -> None:
                made = gitea.create_webhook(
                    url, owner=org, repo=repo if repo_hook else None, secret=secret
                )
                hooks.append(
                    f"/repos/{org}/{repo}/hooks/{made['id']}"
                    if repo_hook
                    else f"/orgs/{org}/hooks/{made['id']}"
                )

            # The team's org hook, a repo hook with a wrong secret, an org hook signed with a
            # Secret that lacks the credentials label, and an "admin's" org hook signed with
            # the operator-wide secret.
            await asyncio.to_thread(add_hook, team_secret)
            await asyncio.to_thread(add_hook, "wrong-" + team_secret, True)
            await asyncio.to_thread(add_hook, unlabelled_secret)
            await asyncio.to_thread(add_hook, operator_secret)
            await asyncio.to_thread(gitea.push_workflow, org, repo, "ci", WORKFLOW)

            # Each hook gets two deliveries: "queued" for build, "waiting" for after.
            try:
                await asyncio.wait_for(all_delivered.wait(), 60)
            except TimeoutError:
                pytest.fail(f"Gitea delivered only {outcomes} within 60 s")
            # Nothing more arrives; a group woken twice within 1 s gets its second wake-up at
            # the end of that second (the per-group limit defers it, never drops it).
            await asyncio.sleep(2.5)
        finally:
            await server.stop()
            for path in hooks:
                with contextlib.suppress(Exception):
                    gitea.delete(path)

    counts = Counter(outcomes)
    # team hook: accepted + ignored ("waiting"); operator hook: accepted + ignored;
    # wrong secret and unlabelled Secret: both deliveries 401.
    assert counts == {"accepted": 2, "ignored": 2, "unauthorized": 4}, outcomes
    # The team's secret woke its own group whose labels fit; the operator-wide one every group
    # whose scope and labels fit, the global one included; the gpu group never.
    assert Counter(woken) == {
        f"{ns}/mine": 2,
        f"{ns}/unlabelled": 1,
        f"{ns}/no-hook": 1,
        f"{ns}/global": 1,
    }, woken


def test_the_operator_serves_webhooks_and_routes_from_its_cache(
    cluster: Any,
    kube: KubeClient,
    gitea: GiteaAPI,
    team_namespace: str,
    webhook_target: Any,
    start_operator: Any,
    tmp_path: Any,
) -> None:
    """The CLI wiring: --webhook-port and --webhook-secret-file, groups from the informer cache."""
    ns, org, repo = team_namespace, webhook_target.org, webhook_target.repo
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text(secrets.token_hex(16) + "\n")
    make_tokens(kube, ns, cluster, webhook_target)
    kube.post(
        GROUPS.format(ns=ns),
        runner_group("ci", target=webhook_target, url=cluster.gitea_url, image="x"),
    )
    op = start_operator(ns, extra=("--webhook-secret-file", str(secret_file)))
    port = int(op.args[op.args.index("--webhook-port") + 1])

    def logged(event: str) -> list[dict[str, Any]]:
        return [e for e in op.log_events() if e.get("event") == event]

    # The events a delivery needs, before it is sent: the receiver listens, the caches hold
    # the group. Then the wait is for the delivery itself, with room for a loaded machine.
    wait_until(lambda: logged("serving Gitea webhooks"), timeout=120, what="the receiver")
    wait_until(lambda: logged("caches synced, starting workers"), timeout=120, what="the caches")
    made = gitea.create_webhook(
        f"http://127.0.0.1:{port}/hooks/gitea", owner=org, secret=secret_file.read_text().strip()
    )
    try:
        gitea.push_workflow(org, repo, "ci", WORKFLOW)
        accepted = wait_until(
            lambda: [e for e in logged("webhook delivery accepted") if e["action"] == "queued"],
            timeout=180,
            what="the operator accepting the queued delivery",
        )
        assert accepted[0]["woken"] == [f"{ns}/ci"]
        assert accepted[0]["repository"] == f"{org}/{repo}"
    finally:
        gitea.delete(f"/orgs/{org}/hooks/{made['id']}")


async def test_hook_registration_is_idempotent_rotates_the_secret_and_removes(
    cluster: Any, gitea: GiteaAPI, webhook_target: Any
) -> None:
    org, repo = webhook_target.org, webhook_target.repo
    scope = ScopeRef(Scope.ORG, org=org)
    delivered = asyncio.Event()
    outcomes: list[str] = []
    woken: list[str] = []
    rotated = secrets.token_hex(16)

    def on_delivery(outcome: str) -> None:
        outcomes.append(outcome)
        delivered.set()

    group = GroupDescriptor(
        "ns/org", cluster.gitea_url, Scope.ORG, org, None, frozenset({"gro-linux"})
    )
    server = WebhookServer(
        "127.0.0.1",
        0,
        FakeOperator([group], on_wake=woken.append, on_delivered=on_delivery),
        operator_secret=rotated.encode(),
    )
    await server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/hooks/gitea"
        async with aiohttp.ClientSession() as session:
            hooks = HookClient(GiteaClient(session, cluster.gitea_url, cluster.gitea_token).call)
            first = await hooks.ensure_hook(scope, url, secrets.token_hex(16))
            again = await hooks.ensure_hook(scope, url, secrets.token_hex(16))
            assert first.created and not again.created and again.id == first.id
            new = await hooks.ensure_hook(scope, url, rotated, rotate=True)
            assert new.created and new.id != first.id
            listed = await asyncio.to_thread(gitea.get, f"/orgs/{org}/hooks")
            assert [(h["id"], h["events"], h["active"]) for h in listed] == [
                (new.id, ["workflow_job"], True)
            ]

            await asyncio.to_thread(
                gitea.push_workflow, org, repo, "ci", WORKFLOW.split("  after:")[0]
            )
            try:
                await asyncio.wait_for(delivered.wait(), 60)
            except TimeoutError:
                pytest.fail("Gitea delivered nothing to the registered hook within 60 s")
            # Signed with the rotated secret.
            assert outcomes == ["accepted"]
            assert woken == ["ns/org"]

            assert await hooks.remove_hook(scope, url) == 1
            assert await asyncio.to_thread(gitea.get, f"/orgs/{org}/hooks") == []
            assert await hooks.remove_hook(scope, url) == 0
    finally:
        await server.stop()


def test_a_group_that_manages_its_hook_is_woken_by_it_and_removes_it_when_deleted(
    cluster: Any,
    kube: KubeClient,
    gitea: GiteaAPI,
    team_namespace: str,
    gitea_target: Any,
    start_operator: Any,
) -> None:
    """spec.webhook.manageHook end to end: the operator creates the organisation hook with
    the group's own secret, Gitea's real delivery wakes the group long before its next poll
    (pollInterval 10m), and deleting the group removes the hook."""
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    labelled_secret(kube, ns, "hook", secrets.token_hex(16), labelled=True)
    port = free_port()
    delivery = f"http://127.0.0.1:{port}/hooks/gitea"
    start_operator(ns, extra=("--webhook-port", str(port), "--webhook-url", delivery))
    group = runner_group(
        "hooked",
        target=gitea_target,
        url=cluster.gitea_url,
        image="x",
        pollInterval="10m",
        webhook={"secretRef": {"name": "hook", "key": "secret"}, "manageHook": True},
    )
    manifests.apply(kube, group, namespace=ns)

    def webhook_condition() -> dict[str, Any]:
        return next(
            (c for c in group_status(kube, ns, "hooked").get("conditions", [])
             if c["type"] == "Webhook"),
            {},
        )  # fmt: skip

    cond = wait_until(
        lambda: (c := webhook_condition()).get("status") == "True" and c,
        what="the Webhook condition True",
    )
    assert cond["reason"] == "HookRegistered"
    (hook,) = gitea.get(f"/orgs/{org}/hooks")
    assert hook["config"]["url"] == f"{delivery}?group={ns}%2Fhooked"
    assert hook["events"] == ["workflow_job"] and hook["active"]
    # The first poll is done (the condition follows it); the next is 10 minutes away.
    gitea.push_workflow(org, repo, "ci", WORKFLOW.split("  after:")[0])
    wait_until(
        lambda: runner_jobs(kube, ns, "hooked"),
        timeout=60,
        what="a runner Job, started by the hook's delivery",
    )
    kube.delete(f"{GROUPS.format(ns=ns)}/hooked")
    wait_until(
        lambda: not kube.get(f"{GROUPS.format(ns=ns)}")["items"],
        timeout=90,
        what="the group gone",
    )
    assert gitea.get(f"/orgs/{org}/hooks") == []


def test_a_real_delivery_stretches_the_safety_net_poll_of_a_quiet_group(
    cluster: Any,
    kube: KubeClient,
    gitea: GiteaAPI,
    team_namespace: str,
    gitea_target: Any,
    start_operator: Any,
) -> None:
    """Issue 47 against Gitea itself: the group polls at ``pollInterval`` until a delivery
    of Gitea's arrives through its managed hook (here about a job of another label, which
    wakes nobody), then at ``spec.webhook.pollInterval``, and its status says so."""
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    labelled_secret(kube, ns, "hook", secrets.token_hex(16), labelled=True)
    port = free_port()
    delivery = f"http://127.0.0.1:{port}/hooks/gitea"
    start_operator(ns, extra=("--webhook-port", str(port), "--webhook-url", delivery))
    group = runner_group(
        "quiet",
        target=gitea_target,
        url=cluster.gitea_url,
        image="x",
        pollInterval="15s",
        webhook={
            "secretRef": {"name": "hook", "key": "secret"},
            "manageHook": True,
            "pollInterval": "10m",
        },
    )
    manifests.apply(kube, group, namespace=ns)

    def poll() -> dict[str, Any]:
        return dict(group_status(kube, ns, "quiet").get("poll") or {})

    before = wait_until(lambda: poll().get("reason") and poll(), what="status.poll")
    assert before["interval"] == "15s"
    assert before["reason"] in ("NoDeliverySinceStart", "HookNotHealthy")
    gitea.push_workflow(org, repo, "other", workflow("other", {"build": "not-ours"}))
    after = wait_until(
        lambda: (p := poll()).get("reason") == "DeliveriesArrive" and p,
        timeout=60,
        what="the poll stretched by Gitea's delivery",
    )
    assert after["interval"] == "10m"
    assert not runner_jobs(kube, ns, "quiet")  # the job is not the group's: nothing made


def test_a_managed_hook_without_the_operators_url_says_what_is_missing(
    cluster: Any,
    kube: KubeClient,
    team_namespace: str,
    gitea_target: Any,
    start_operator: Any,
) -> None:
    ns = team_namespace
    make_tokens(kube, ns, cluster, gitea_target)
    labelled_secret(kube, ns, "hook", secrets.token_hex(16), labelled=True)
    start_operator(ns)
    group = runner_group(
        "hooked",
        target=gitea_target,
        url=cluster.gitea_url,
        image="x",
        webhook={"secretRef": {"name": "hook", "key": "secret"}, "manageHook": True},
    )
    manifests.apply(kube, group, namespace=ns)
    cond = wait_until(
        lambda: next(
            (c for c in group_status(kube, ns, "hooked").get("conditions", [])
             if c["type"] == "Webhook" and c["status"] == "False"),
            None,
        ),
        what="the Webhook condition False",
    )  # fmt: skip
    assert cond["reason"] == "WebhookURLNotSet" and "--webhook-url" in cond["message"]
    ready = next(c for c in group_status(kube, ns, "hooked")["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"  # polling serves the group meanwhile

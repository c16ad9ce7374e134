"""``tox -e sandbox``: the operator at work, without a cluster of your own.

Starts the testbed (Kubernetes control plane, kwok, Gitea), installs the operator's CRD and
RBAC from manifests/, creates a demo organisation, repository and workflow, the team
namespace with its Secrets and a RunnerGroup, and runs the operator in the foreground with
its ServiceAccount's token. The testbed's kubelet harness runs each runner Pod as a real
runner process on this machine (host mode), so the workflow's jobs really run, report
success in Gitea, and the runner Jobs finish. Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import signal
import time

from tests.support import manifests
from tests.support.launcher import OPERATOR_NS, OPERATOR_SA, OperatorProcess, launch
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.kubelet_harness import KubeletHarness
from tests.testbed.sandbox import Sandbox

NS = "team-a"
WORKFLOW = """\
name: demo
on: [push]
jobs:
{jobs}
"""
JOB = """\
  job-{i}:
    runs-on: ubuntu-latest
    steps:
      - run: echo "hello from job {i} on $(hostname)"; sleep {sleep}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.demo", description=__doc__)
    parser.add_argument("--jobs", type=int, default=4, help="workflow jobs to queue (4)")
    parser.add_argument("--max", type=int, default=2, help="maxActiveRunners (2)")
    args = parser.parse_args(argv)

    print("starting the testbed (the first run compiles it; see tests/testbed/README.md)...")
    sandbox = Sandbox()
    sandbox.start()
    harness = None
    operator: OperatorProcess | None = None
    try:
        kube = sandbox.kube
        assert kube is not None and sandbox.gitea_url and sandbox.gitea_token
        for name in ("crd.yaml", "namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
            for obj in manifests.load(name):
                manifests.apply(kube, obj)
        for obj in manifests.load("examples/namespace.yaml"):
            manifests.apply(kube, obj)
        for obj in manifests.load("examples/secret-access.yaml"):
            manifests.apply(kube, obj, namespace=NS)
        time.sleep(2)  # let the CRD become established

        gitea = GiteaAPI(sandbox.gitea_url, token=sandbox.gitea_token)
        gitea.create_org("demo")
        gitea.create_repo("demo", "app")
        registration = gitea.registration_token("org", owner="demo")
        manifests.apply(
            kube,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "gitea-runner-tokens",
                    "labels": {"gitea.bpg.pw/credentials": "true"},
                },
                "stringData": {
                    "registration-token": registration,
                    "api-token": sandbox.gitea_token,
                },
            },
            namespace=NS,
        )
        sandbox.use_harness_node(True)
        harness = KubeletHarness(kube, instance_url=sandbox.gitea_url).start()

        kubeconfig = sandbox.kubeconfig_for_token(
            kube.create_token(OPERATOR_NS, OPERATOR_SA, seconds=86400)
        )
        operator = launch(
            kubeconfig,
            [NS],
            log_path=None,  # the operator's log is the demo's output
            log_format="console",
            extra=("--job-ttl-seconds", "60"),
        )
        group = {
            "apiVersion": "gitea.bpg.pw/v1alpha1",
            "kind": "RunnerGroup",
            "metadata": {"name": "demo"},
            "spec": {
                "scope": "org",
                "org": "demo",
                "gitea": {"url": sandbox.gitea_url},
                "labels": ["ubuntu-latest"],
                "maxActiveRunners": args.max,
                "pollInterval": "5s",
                "registrationToken": {
                    "secretRef": {"name": "gitea-runner-tokens", "key": "registration-token"}
                },
                "authToken": {"secretRef": {"name": "gitea-runner-tokens", "key": "api-token"}},
            },
        }
        manifests.apply(kube, group, namespace=NS)
        jobs = "".join(JOB.format(i=i, sleep=5 + 3 * i) for i in range(1, args.jobs + 1))
        gitea.push_workflow("demo", "app", "demo.yml", WORKFLOW.format(jobs=jobs))

        print(
            f"""
The sandbox is up. In another terminal:

    export KUBECONFIG={sandbox.kubeconfig}
    kubectl get runnergroups,jobs,pods -n {NS} -w

Gitea: {sandbox.gitea_url}  (user {sandbox.gitea_admin_username},
       password {sandbox.gitea_admin_password}); the workflow runs at
       {sandbox.gitea_url}/demo/app/actions
Push more workflows there (runs-on: ubuntu-latest) to see the operator scale again.
Ctrl-C stops the operator and the sandbox.
""",
            flush=True,
        )
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        operator.proc.wait()
        return int(operator.proc.returncode or 0)
    except KeyboardInterrupt:
        return 0
    finally:
        # A second Ctrl-C (tox forwards one too) must not cut the clean-up short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if operator is not None:
            operator.stop(timeout=30)
        if harness is not None:
            harness.stop()
        sandbox.stop()


if __name__ == "__main__":
    raise SystemExit(main())

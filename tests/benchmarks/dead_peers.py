"""What an operator costs while its peers are gone:

    python -m tests.benchmarks.dead_peers [--groups 200] [--down 180] [--cpuprobe DIR]

``--groups`` repo groups on the testbed's control plane and the fake Gitea, polling every
15 s. After a quiet minute (measured), the fake Gitea stops for good and the API server
stops for ``--down`` seconds, then comes back. Prints the operator's CPU per 30 s while
both are gone, and after the API server is back; with ``--cpuprobe DIR`` the profile of
the outage goes to ``DIR/cpu-1.txt``. An operator waiting for its peers should cost less
than one doing its work, not more. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from pathlib import Path

from tests.benchmarks import common
from tests.benchmarks.scale import LABEL, group, kwok_image
from tests.support import manifests
from tests.support.fake_gitea import GroupScope, SimulatedGitea
from tests.testbed.sandbox import Sandbox


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--down", type=float, default=180.0)
    parser.add_argument("--cpuprobe", help="profile the outage (cpuprobe.py) into this DIR")
    args = parser.parse_args(argv)
    owner = f"dead-{uuid.uuid4().hex[:4]}"
    namespaces = [f"{owner}-{i:03d}" for i in range(args.namespaces)]
    fake = SimulatedGitea()
    probe = Path(args.cpuprobe) if args.cpuprobe else None
    with Sandbox(gitea=False, harness_node=False) as sandbox:
        kube = common.install(sandbox)
        fake.start(None)
        for ns in namespaces:
            common.team(kube, ns, "registration-token", "api-token")
        with common.operator(sandbox, namespaces, cpuprobe=probe) as op:
            for i in range(args.groups):
                ns, name = namespaces[i % len(namespaces)], f"r{i:04d}"
                fake.group(ns, name, GroupScope(owner, name, (LABEL,)))
                manifests.apply(
                    kube,
                    group(name, fake.url, owner, name, image=kwok_image(60)),
                    namespace=ns,
                )
            time.sleep(45)
            cpu, at = op.cpu_seconds(), time.monotonic()
            time.sleep(60)
            alive = (op.cpu_seconds() - cpu) / (time.monotonic() - at)
            print(f"{args.groups} groups, peers up: operator CPU {alive:.3f} cores")
            fake.stop()
            outage = threading.Thread(
                target=sandbox.restart, args=("kube-apiserver", args.down), daemon=True
            )
            if probe is not None:
                op.snapshot()  # start sampling
            outage.start()
            started = time.monotonic()
            cpu, at = op.cpu_seconds(), started
            while outage.is_alive():
                outage.join(30)
                now, used = time.monotonic(), op.cpu_seconds()
                state = "gone" if outage.is_alive() else "back"
                print(
                    f"  t={now - started:5.0f}s  Gitea gone, API server {state}: CPU "
                    f"{(used - cpu) / (now - at):.3f} cores, RSS {op.rss_mb():.0f} MB",
                    flush=True,
                )
                cpu, at = used, now
            if probe is not None:
                op.snapshot()  # the outage's profile
            for _ in range(4):
                time.sleep(30)
                now, used = time.monotonic(), op.cpu_seconds()
                print(
                    f"  t={now - started:5.0f}s  Gitea gone, API server back: CPU "
                    f"{(used - cpu) / (now - at):.3f} cores, RSS {op.rss_mb():.0f} MB",
                    flush=True,
                )
                cpu, at = used, now
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

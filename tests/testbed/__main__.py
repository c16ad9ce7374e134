"""Command line for the testbed: ``python -m tests.testbed build|up|down|env|harness``.

Why: developers want the same peers the tests use, by hand: build them once,
start them (in the foreground or detached), point kubectl/the operator at them,
and stop them again without leaving processes behind.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import build


def default_state_file() -> Path:
    """Where ``up --detach`` records PIDs for ``down`` and ``env``."""
    return Path(os.environ.get("GRO_TESTBED_STATE") or build.cache_root() / "sandbox-state.json")


def _print_info(info: dict[str, Any], state: Path) -> None:
    print(f"workdir:        {info['workdir']}")
    if info.get("kubeconfig"):
        print(f"kubeconfig:     {info['kubeconfig']}")
        print(f"apiserver:      {info['apiserver_url']}")
        print(f"ca file:        {info['ca_file']}")
        print(f"admin token:    {info['admin_token']}")
    if info.get("gitea_url"):
        print(
            f"gitea:          {info['gitea_url']}  (admin {info['gitea_admin_username']} / "
            f"{info['gitea_admin_password']})"
        )
        print(f"gitea token:    {info['gitea_token_file']}")
    if info.get("harness_node"):
        print(
            f"nodes:          {info['kwok_node']} (kwok), "
            f"{info['harness_node']} (harness, cordoned)"
        )
    print(f"logs:           {info['workdir']}/logs/")
    print(f"state file:     {state}")
    print(f"started in:     {info.get('startup_seconds')} s")
    print('shell setup:    eval "$(python -m tests.testbed env)"')


def cmd_build(args: argparse.Namespace) -> int:
    """Build (or find cached) the components."""
    unknown = set(args.components) - set(build.COMPONENTS)
    if unknown:
        print(f"unknown component(s): {' '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    build.ensure_built(args.components or None, force=args.force)
    print(f"built in {time.monotonic() - t0:.1f}s into {build.cache_root()}")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    """Start a sandbox; stay in the foreground until Ctrl-C unless --detach."""
    from .sandbox import Sandbox

    state = Path(args.state)
    if state.exists():
        old = json.loads(state.read_text())
        if any(_alive(p) for p in old.get("pids", {}).values()):
            print(
                f"a sandbox is already up (state {state}); run: python -m tests.testbed down",
                file=sys.stderr,
            )
            return 1
    kube = "existing" if args.existing else ("none" if args.no_kube else "local")
    sb = Sandbox(
        kube=kube,
        gitea=not args.no_gitea,
        keep_workdir=args.detach or None,
        die_with_parent=not args.detach,
        gitea_version=args.gitea_version,
    )
    sb.start()
    info = sb.info()
    if args.harness and sb.with_harness_node:
        argv = [sys.executable, "-m", "tests.testbed", "harness", "--state", str(state)]
        log = open(sb.logs_dir / "kubelet-harness.log", "ab")  # noqa: SIM115 - handed to the child
        p = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        sb.processes["kubelet-harness"] = p
        sb.logs["kubelet-harness"] = sb.logs_dir / "kubelet-harness.log"
        info = sb.info()
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps(info, indent=2))
    _print_info(info, state)
    if args.detach:
        atexit.unregister(sb.stop)  # the processes outlive this command; `down` stops them
        sb.processes.clear()
        return 0
    print("running; Ctrl-C to stop", flush=True)
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stop["now"]:
            dead = [n for n, p in sb.processes.items() if p.poll() is not None]
            if dead:
                print(f"process(es) exited: {', '.join(dead)}; see {sb.logs_dir}", file=sys.stderr)
                break
            time.sleep(0.5)
    finally:
        sb.stop()
        with contextlib.suppress(FileNotFoundError):
            state.unlink()
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def cmd_down(args: argparse.Namespace) -> int:
    """Stop a detached sandbox: SIGTERM each process group, SIGKILL after 10 s, rm workdir."""
    state = Path(args.state)
    if not state.exists():
        print(f"no state file {state}: nothing to stop", file=sys.stderr)
        return 0
    info = json.loads(state.read_text())
    pids = list(info.get("pids", {}).values())[::-1]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    if not args.keep and info.get("workdir"):
        shutil.rmtree(info["workdir"], ignore_errors=True)
    state.unlink()
    print(f"stopped {len(pids)} process group(s)")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    """Print ``export`` lines for a running sandbox."""
    state = Path(args.state)
    if not state.exists():
        print(
            f"no state file {state}; start one with: python -m tests.testbed up --detach",
            file=sys.stderr,
        )
        return 1
    info = json.loads(state.read_text())
    env = {"GRO_TESTBED_WORKDIR": info["workdir"], "GRO_TESTBED_STATE": str(state)}
    if info.get("kubeconfig"):
        env["KUBECONFIG"] = info["kubeconfig"]
    if info.get("gitea_url"):
        env["GITEA_URL"] = info["gitea_url"]
        env["GITEA_TOKEN"] = info["gitea_token"]
    for k, v in env.items():
        print(f"export {k}={shlex.quote(str(v))}")
    return 0


def cmd_harness(args: argparse.Namespace) -> int:
    """Run the kubelet harness for the harness node of a running sandbox (foreground)."""
    from .kube import KubeClient
    from .kubelet_harness import KubeletHarness

    info = json.loads(Path(args.state).read_text())
    kube = KubeClient(info["apiserver_url"], info["admin_token"], info["ca_file"])
    h = KubeletHarness(kube, workdir=Path(info["workdir"]) / "harness")
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    with h:
        print(f"kubelet harness running pods of {h.node_name} with {h.runner}", flush=True)
        seen = 0
        while not stop["now"]:
            for e in h.errors[seen:]:
                print("harness error:", e, flush=True)
            seen = len(h.errors)
            time.sleep(0.5)
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    """Build (or find cached) the real node's images; print each one's time."""
    from . import images

    images.ensure_images()
    return 0


def cmd_real_node_cleanup(args: argparse.Namespace) -> int:
    """Undo whatever a killed real node left on this machine (the next start does it too)."""
    from . import realnode

    left = realnode.cleanup_unless_running()
    print("real node: clean" if not left else f"real node: could not remove {left}")
    return 0 if not left else 1


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run one subcommand."""
    ap = argparse.ArgumentParser(prog="python -m tests.testbed", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the peers into the cache")
    b.add_argument(
        "components", nargs="*", help=f"any of: {' '.join(build.COMPONENTS)} (default: all)"
    )
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    sub.add_parser("images", help="build the real node's images (no registry)")
    sub.add_parser("real-node-cleanup", help="remove what a killed real node left behind")
    for name in ("up", "down", "env", "harness"):
        p = sub.add_parser(name)
        p.add_argument("--state", default=str(default_state_file()), help="state file path")
        if name == "up":
            p.add_argument(
                "--detach", action="store_true", help="leave it running; stop with `down`"
            )
            p.add_argument("--no-gitea", action="store_true")
            p.add_argument("--no-kube", action="store_true", help="Gitea only")
            p.add_argument(
                "--gitea-version",
                choices=("default", "oldest"),
                default=None,
                help="Gitea release: the pinned default or the oldest supported "
                "(default: $GRO_TESTBED_GITEA, else default)",
            )
            p.add_argument(
                "--existing", action="store_true", help="use the current KUBECONFIG cluster"
            )
            p.add_argument(
                "--harness",
                action="store_true",
                help="also run the kubelet harness for e2e-node-0 as a process",
            )
        if name == "down":
            p.add_argument("--keep", action="store_true", help="keep the workdir (logs)")
    args = ap.parse_args(argv)
    return {
        "build": cmd_build,
        "up": cmd_up,
        "down": cmd_down,
        "env": cmd_env,
        "harness": cmd_harness,
        "images": cmd_images,
        "real-node-cleanup": cmd_real_node_cleanup,
    }[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())

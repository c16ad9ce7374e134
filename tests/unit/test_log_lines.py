"""The operator's JSON log lines stay whole when several threads log at once (the webhook
receiver's thread, the Leases' threads and the controller's loop): a log collector reads
one object per line."""

from __future__ import annotations

import io
import json
import sys
import threading
from pathlib import Path

import pytest
import structlog

from gitea_runner_operator import logsetup


def test_lines_logged_from_several_threads_at_once_are_each_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # stderr as the interpreter makes it when it is not a terminal (a container's log): no
    # buffer, each write a system call, which lets another thread in.
    out = io.TextIOWrapper(io.FileIO(tmp_path / "log", "w"), write_through=True)
    monkeypatch.setattr(sys, "stderr", out)
    logsetup.configure("json", "debug")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads change hands as often as they can

    def log_many(name: str) -> None:
        log = structlog.get_logger(name)
        for n in range(3000):
            log.debug("webhook delivery accepted", thread=name, n=n, padding="x" * 200)

    threads = [threading.Thread(target=log_many, args=(f"t{i}",)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
        structlog.reset_defaults()
    out.close()
    lines = (tmp_path / "log").read_text().splitlines()
    parsed = [json.loads(line) for line in lines]  # raises on a line two threads ran into
    assert len(parsed) == 4 * 3000
    assert {(p["thread"], p["n"]) for p in parsed} == {
        (f"t{i}", n) for i in range(4) for n in range(3000)
    }

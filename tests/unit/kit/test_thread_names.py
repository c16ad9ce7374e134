"""The operator's threads show their names to the kernel (``top -H``, per-thread CPU)."""

from __future__ import annotations

import threading
from pathlib import Path

from gitea_runner_operator.kit.offload import Offload
from gitea_runner_operator.kit.thread_names import kernel_name, name_this_thread


def _kernel_name_of_current_thread() -> str:
    return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()


def test_the_kernel_keeps_fifteen_bytes_of_a_name() -> None:
    assert kernel_name("why-unmatched_0") == b"why-unmatched_0"
    assert kernel_name("webhook-receiver") == b"webhook-receive"
    assert kernel_name("naïve") == b"na?ve"


def test_a_thread_that_names_itself_is_seen_under_its_name_by_the_kernel() -> None:
    seen: list[str] = []

    def body() -> None:
        name_this_thread()
        seen.append(_kernel_name_of_current_thread())

    thread = threading.Thread(target=body, name="member-lease")
    thread.start()
    thread.join()
    assert seen == ["member-lease"]


async def test_offloaded_work_runs_in_a_thread_the_kernel_knows_by_its_purpose() -> None:
    offload: Offload[str, str] = Offload("why-unmatched")
    assert await offload.run("x", _kernel_name_of_current_thread) == "why-unmatched_0"

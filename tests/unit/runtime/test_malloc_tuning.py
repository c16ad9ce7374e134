"""The allocator's mmap threshold (runtime/malloc_tuning.py): big buffers freed go back to
the kernel, so the RSS does not keep what a tenant's big answers once needed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from gitea_runner_operator.runtime import malloc_tuning

# Big answers of random sizes, three in flight at once, each followed by a smaller
# allocation that lives on (what the observations keep), as under issue 45's attacks.
_ANSWERS = textwrap.dedent(
    """
    import os, random, sys
    from gitea_runner_operator.runtime.malloc_tuning import fix_mmap_threshold
    if sys.argv[1] == "fixed":
        assert fix_mmap_threshold({})
    rng, kept, in_flight = random.Random(7), [], []
    for _ in range(200):
        answer = bytearray(rng.randint(1, 16) * 1024 * 1024)
        answer[::4096] = b"x" * len(range(0, len(answer), 4096))
        kept.append(bytearray(rng.randint(1000, 100000)))
        in_flight.append(answer)
        if len(in_flight) > 3:
            in_flight.pop(0)
    in_flight.clear()
    with open("/proc/self/statm") as statm:
        print(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20)
    """
)


def _resident_mib_after(mode: str) -> int:
    env = {"PATH": "/usr/bin:/bin"}  # no MALLOC_* of the caller's
    out = subprocess.run(
        [sys.executable, "-c", _ANSWERS, mode], env=env, capture_output=True, check=True
    )
    return int(out.stdout)


def test_big_answers_freed_leave_the_resident_memory() -> None:
    kept_by_default = _resident_mib_after("default")
    kept_fixed = _resident_mib_after("fixed")
    assert kept_fixed + 20 <= kept_by_default, (kept_fixed, kept_by_default)


def test_the_operators_own_environment_wins() -> None:
    assert not malloc_tuning.fix_mmap_threshold({"MALLOC_MMAP_THRESHOLD_": "65536"})

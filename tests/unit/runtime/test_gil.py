"""The operator asks computing threads to hand the interpreter to the event loop within 1 ms
(runtime/gil.py): the loop, which every tenant waits for, then waits less at each wake."""

from __future__ import annotations

import sys

from gitea_runner_operator.runtime import gil


def test_the_process_hands_the_interpreter_over_within_a_millisecond():
    default = sys.getswitchinterval()
    try:
        gil.tune_switch_interval()
        assert sys.getswitchinterval() <= 0.001 < default
    finally:
        sys.setswitchinterval(default)

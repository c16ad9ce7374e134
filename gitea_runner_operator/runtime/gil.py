"""How long the event loop waits for the interpreter while a thread of ours computes.

The operator computes what a tenant's input costs in threads of their own (the unmatched-
jobs evaluation, big answers' JSON, large signatures: kit/offload.py), so the event loop
never waits for them to finish. It still shares the interpreter with them: each time the
loop wakes (an answer arrived, a timer is due) while such a thread holds the interpreter, it
waits for the thread to hand it over, which CPython asks for after its switch interval, 5 ms
by default. A genuine webhook delivery or another tenant's poll wakes the loop several times
on its way (the connection, its request, its answer), so under issue 45's attacks every
one of those wakes could cost up to 5 ms, while a thread evaluated hostile URLs' job lists.

Measured on the project's machine (a loop waking every 2 ms beside a thread running Python
code): the wake came 5.5 ms late at p50 and 9.1 ms at p99 with 5 ms, 1.5 and 4.3 ms with
1 ms. Handing over more often costs the computing thread a little (a switch is a few
microseconds, at most a thousand a second); the loop is what every tenant waits for.
"""

from __future__ import annotations

import sys
from typing import Final

SWITCH_INTERVAL: Final = 0.001  # seconds; CPython's default is 0.005


def tune_switch_interval() -> None:
    """Have a computing thread hand the interpreter to a waking event loop within 1 ms."""
    sys.setswitchinterval(SWITCH_INTERVAL)

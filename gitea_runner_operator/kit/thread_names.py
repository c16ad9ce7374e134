"""The operator's threads carry their names into the kernel, so ``top -H``, ``ps -L`` and a
benchmark's per-thread CPU say which of them used the cores.

Python 3.11 names a thread for itself only; the kernel sees every thread under the process's
name. The receiver, the Lease's heartbeat and the offloaded work (the unmatched-jobs
evaluation, large answers' parses, HMACs) each take CPU that a tenant's input can decide, and
"the operator used 0.3 cores under attack" does not say whose. Linux keeps 15 bytes of a name
(``prctl(PR_SET_NAME)``); elsewhere, or without ``prctl``, nothing happens.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
from collections.abc import Callable
from typing import Final

_PR_SET_NAME: Final = 15
_KERNEL_NAME_BYTES: Final = 15


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl: Callable[..., int] = libc.prctl
        return prctl
    except (OSError, AttributeError):
        return None


_SET = _prctl()


def kernel_name(name: str) -> bytes:
    """What the kernel keeps of ``name``: its first 15 bytes of ASCII (the rest replaced)."""
    return name.encode("ascii", "replace")[:_KERNEL_NAME_BYTES]


def name_this_thread() -> None:
    """Give the calling thread's Python name to the kernel. A ``ThreadPoolExecutor``'s
    ``initializer`` or a thread's first call."""
    if _SET is None:
        return
    _SET(_PR_SET_NAME, ctypes.c_char_p(kernel_name(threading.current_thread().name)), 0, 0, 0)

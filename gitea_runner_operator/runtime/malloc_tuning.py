"""glibc's allocator, kept from growing the resident memory with every large answer it frees.

A tenant's Gitea answers come in buffers of up to 16 MiB (forge/limits.py). glibc serves an
allocation above its mmap threshold (128 KiB at start) from a mapping of its own, given back
to the kernel when freed; but each such free raises the threshold to the freed size (up to
32 MiB), so every later buffer of that size comes from the heap, whose freed space the
kernel gets back only from its top. Under issue 45's attacks, sustained for 6 minutes, the
operator's RSS rose in steps of 30-60 MiB with the big answers (76 -> 335 MiB of the chart's
384 MiB) and whole collections of the heap gave none of it back; with the threshold fixed
at 128 KiB the RSS peaked at 239 MiB and each whole collection gave 55-60 MiB back.

Fixed here, at process start, unless ``MALLOC_MMAP_THRESHOLD_`` says otherwise (the
operator's own environment wins). Where the C library is not glibc (``mallopt`` missing,
musl), nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Final

import structlog

log = structlog.get_logger(__name__)

M_MMAP_THRESHOLD: Final = -3  # glibc's malloc.h
MMAP_THRESHOLD: Final = 128 * 1024  # glibc's own starting value, kept: no longer raised
ENVIRONMENT: Final = "MALLOC_MMAP_THRESHOLD_"


def fix_mmap_threshold(environ: dict[str, str] | None = None) -> bool:
    """Keep big buffers in mappings of their own; whether the allocator took it."""
    if ENVIRONMENT in (os.environ if environ is None else environ):
        return False  # set for this process by whoever started it
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    taken = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    if not taken:
        log.warning("the allocator's mmap threshold could not be fixed; the RSS may grow")
    return taken

"""Other threads' Python frames, read without CPython's `sys._current_frames()` deadlock.

keras-gpu reads where other threads are from a thread of its own: the
heartbeat writer (where the training thread is, for the launcher's hang
report), the input-pipeline check, the watch on the running `fit`. The one
way to do that is `sys._current_frames()`, and on CPython 3.11 and earlier
it can deadlock the whole process (CPython gh-106883): it holds the
interpreter's thread-list lock while it builds its dictionary, an
allocation there can run a garbage collection, and a collection that frees
a `threading.local` takes the same lock again, or lets another thread take
the GIL and wait for that lock. Every thread then waits forever, `fit`
included. CPython fixed it by pausing the collector during the call; from
3.12 a collection runs only between bytecodes, never inside it.

`current_frames` pauses the collector around the call where the interpreter
is older than 3.12, and only where it was on: a program that turned it off
keeps it off. A program that turns the collector on or off from another
thread during those few microseconds may find it as this call left it.

Examples:
    >>> import threading
    >>> from keras_gpu.core.frames import current_frames
    >>> threading.get_ident() in current_frames()
    True
"""

from __future__ import annotations

import gc
import sys
import threading
from types import FrameType

__all__ = ["PAUSES_GC", "current_frames"]

PAUSES_GC = sys.version_info < (3, 12)
"""Whether `current_frames` pauses the garbage collector around `sys._current_frames()` (CPython before 3.12)."""

_lock = threading.Lock()  # keras-gpu's readers, one at a time: the collector's state is saved and put back whole


def current_frames() -> dict[int, FrameType]:
    """Each thread's innermost frame, by thread identifier (`sys._current_frames()`), without its deadlock.

    Returns:
        A new dictionary; the frames stay alive while it is held, so keep it
        no longer than needed.
    """
    if not PAUSES_GC:
        return sys._current_frames()  # noqa: SLF001 - CPython's documented frame access
    with _lock:
        was_on = gc.isenabled()
        if was_on:
            gc.disable()
        try:
            return sys._current_frames()  # noqa: SLF001 - CPython's documented frame access
        finally:
            if was_on:
                gc.enable()

"""`keras_gpu.core.frames.current_frames`: other threads' frames without CPython's `sys._current_frames()` deadlock.

On CPython before 3.12 a garbage collection inside `sys._current_frames()`
can deadlock the process (gh-106883); keras-gpu's readers pause the
collector around the call, and leave it as they found it.
"""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from keras_gpu.core import frames


@pytest.fixture
def collector_during_the_call(monkeypatch):
    seen = []
    real = sys._current_frames

    def noting():
        seen.append(gc.isenabled())
        return real()

    monkeypatch.setattr(sys, "_current_frames", noting)
    return seen


def test_every_thread_is_there_with_its_frame():
    started, leave = threading.Event(), threading.Event()

    def waiting():
        started.set()
        leave.wait()

    thread = threading.Thread(target=waiting)
    thread.start()
    try:
        started.wait()
        found = frames.current_frames()
        assert {threading.get_ident(), thread.ident} <= set(found)
        names, frame = [], found[thread.ident]
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        assert "waiting" in names
    finally:
        leave.set()
        thread.join()


@pytest.mark.parametrize("paused", [True, False])
def test_the_collector_is_paused_inside_the_call_where_cpython_needs_it_and_put_back(
    monkeypatch, collector_during_the_call, paused
):
    monkeypatch.setattr(frames, "PAUSES_GC", paused)
    assert gc.isenabled()
    frames.current_frames()
    assert collector_during_the_call == [not paused]
    assert gc.isenabled()


def test_a_collector_the_program_turned_off_stays_off(monkeypatch, collector_during_the_call):
    monkeypatch.setattr(frames, "PAUSES_GC", True)
    gc.disable()
    try:
        frames.current_frames()
        assert collector_during_the_call == [False]
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_pause_is_for_the_interpreters_that_need_it():
    assert frames.PAUSES_GC is (sys.version_info < (3, 12))

"""keras-gpu's log lines reach a plain script once, and defer to the application's logging setup."""

from __future__ import annotations

from tests._util import run_python

SCRIPT = """
import logging
{setup}
from keras_gpu.core.log import logger, log_once
logger.info("configure_devices: plain line")
logger.info("keras-gpu: already prefixed")
logger.debug("not shown at INFO")
log_once(logging.WARNING, "k", "warned once")
log_once(logging.WARNING, "k", "warned once")
"""


def _stderr(setup: str) -> list[str]:
    proc = run_python(SCRIPT.format(setup=setup), timeout=60)
    return [line for line in proc.stderr.splitlines() if line.strip()]


def test_plain_script_sees_info_lines_once_with_one_prefix():
    assert _stderr("") == [
        "keras-gpu: configure_devices: plain line",
        "keras-gpu: already prefixed",
        "keras-gpu: warned once",
    ]


def test_application_logging_setup_takes_over_without_duplicates():
    lines = _stderr("logging.basicConfig(format='APP %(levelname)s %(name)s %(message)s')")
    assert lines == [
        "APP INFO keras_gpu configure_devices: plain line",
        "APP INFO keras_gpu keras-gpu: already prefixed",
        "APP WARNING keras_gpu warned once",
    ]


def test_warning_level_hides_the_info_lines():
    assert _stderr("logging.getLogger('keras_gpu').setLevel(logging.WARNING)") == ["keras-gpu: warned once"]


def test_once_scopes_are_independent_and_each_logs_a_key_once(caplog):
    import logging
    import threading

    from keras_gpu.core.log import Once

    first, second = Once(), Once()
    with caplog.at_level(logging.INFO, logger="keras_gpu"):
        emitted = []
        threads = [threading.Thread(target=lambda: emitted.append(first.log(logging.INFO, "k", "hint %d", 1))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert second.log(logging.INFO, "k", "hint %d", 2) is True
        assert second.log(logging.INFO, "k", "hint %d", 2) is False
        assert first.log(logging.INFO, "other", "other key") is True
    assert sorted(emitted) == [False] * 7 + [True]
    assert [r.getMessage() for r in caplog.records if r.name == "keras_gpu"] == ["hint 1", "hint 2", "other key"]


def test_fixes_name_the_call_the_user_wrote():
    from keras_gpu.core.log import call_with, made_by_factory

    class ThroughputLogger:  # stands for any callback class
        pass

    by_hand = ThroughputLogger()
    assert call_with(by_hand, "batch_size") == "`ThroughputLogger(batch_size=...)`"
    (made,) = made_by_factory([ThroughputLogger()])
    assert call_with(made, "batch_size", "samples_per_epoch") == "`keras_gpu.callbacks(batch_size=..., samples_per_epoch=...)`"
    assert call_with(made, peak_flops=1e12) == "`keras_gpu.callbacks(peak_flops=1000000000000.0)`"


def test_process_once_is_the_scope_of_log_once(monkeypatch, caplog):
    import logging

    from keras_gpu.core import log as _log

    monkeypatch.setattr(_log, "_process", _log.Once())
    with caplog.at_level(logging.INFO, logger="keras_gpu"):
        assert _log.log_once(logging.INFO, "k", "first") is True
        # A callback's own handle on the process scope: the key is already spent.
        assert _log.process_once().log(logging.INFO, "k", "again") is False
        assert _log.process_once() is _log.process_once()
    assert [r.getMessage() for r in caplog.records if r.name == "keras_gpu"] == ["first"]

"""A source that cannot work here (NVML with no driver) fails at every poll, each
second. The status strip shows why all along; the log says it once, again only when
the reason changes, and once when the source works again."""

from __future__ import annotations

import logging

import pytest

from collectors.http import SourceError
from dashboard.core import health
from dashboard.core.health import source_poll
from dashboard.core.models import SourceHealth

NO_DRIVER = "NVML: no NVIDIA driver on this node (libnvidia-ml.so not found)"


@pytest.fixture(autouse=True)
def fresh_failure_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "failures", health.FailureLog())


def poll(reason: str | None, scope: str = "node-a") -> None:
    with source_poll("nvml", 1.0, scope=scope):
        if reason:
            raise SourceError(reason)


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "dashboard.core.health" and r.levelno == level]


def test_same_reason_is_logged_once_and_still_shown(db: None, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="dashboard.core.health")
    for _ in range(5):
        poll(NO_DRIVER)
    [warning] = messages(caplog, logging.WARNING)
    assert "nvml@node-a poll failed" in warning and NO_DRIVER in warning
    row = SourceHealth.objects.get(source="nvml", scope="node-a")
    assert (row.state, row.last_error, row.consecutive_failures) == ("down", NO_DRIVER, 5)


def test_a_new_reason_and_a_recovery_are_logged(db: None, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="dashboard.core.health")
    poll(NO_DRIVER)
    poll(NO_DRIVER)
    poll("NVML: driver/library version mismatch")
    poll("NVML: driver/library version mismatch")
    assert [w.split(": ", 1)[1] for w in messages(caplog, logging.WARNING)] == [
        f"{NO_DRIVER} (logged again only when the reason changes)",
        "NVML: driver/library version mismatch (logged again only when the reason changes)"]
    poll(None)
    poll(None)
    assert messages(caplog, logging.INFO) == ["nvml@node-a poll works again"]
    poll(NO_DRIVER)  # failing again after a recovery is news
    assert len(messages(caplog, logging.WARNING)) == 3


def test_each_source_and_node_has_its_own_memory(db: None, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="dashboard.core.health")
    poll(NO_DRIVER, scope="node-a")
    poll(NO_DRIVER, scope="node-b")
    with source_poll("ray", 1.0):
        raise SourceError("cannot reach http://127.0.0.1:9/api/v0/actors: connection refused")
    poll(NO_DRIVER, scope="node-a")
    assert len(messages(caplog, logging.WARNING)) == 3


def test_an_unexpected_error_keeps_its_traceback_once(db: None, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="dashboard.core.health")
    for _ in range(3):
        with source_poll("trial_logs", 1.0):
            raise KeyError("experiment_state")
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "KeyError: 'experiment_state'" in record.getMessage()
    assert record.exc_info and record.exc_info[0] is KeyError

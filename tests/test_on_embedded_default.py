"""Behaviours that must hold on both backends, run again on the embedded default
(SQLite, as `make run` uses it): every query they make works there too."""

from __future__ import annotations

from pathlib import Path

from tests.embedded import pytest_on_embedded_default

# Every test file whose code path makes queries of its own (ORM lookups, raw SQL,
# bulk writes, locking): the pure-rule and browser tests add nothing here.
ON_BOTH_BACKENDS = [
    "tests/test_terminate_on_this_host.py",
    "tests/test_gpu_history_chart.py",
    "tests/test_ray_lists_nothing.py",
    "tests/test_alert_api.py",
    "tests/test_alert_grouping.py",
    "tests/test_notify_retries.py",
    "tests/test_gpu_detectors.py",
    "tests/test_gpu_pipeline.py",
    "tests/test_kill_gpu_process.py",
    "tests/test_source_health.py",
    "tests/test_trial_api.py",
    "tests/test_trial_ingest.py",
    "tests/test_quiet_history.py",
    "tests/test_api_pagination.py",
    "tests/test_audit_trail.py",
    "tests/test_agent_tokens.py",  # an in-process ASGI server on the SQLite test database
    "tests/test_agent_token_admin.py",
]


def test_passes_on_sqlite(tmp_path: Path) -> None:
    # One pytest run for all of them: a Django start-up per file would double the time.
    result = pytest_on_embedded_default(tmp_path, *ON_BOTH_BACKENDS, timeout_s=900)
    assert result.returncode == 0, (f"on SQLite:\n{result.stdout[-8000:]}\n"
                                    f"{result.stderr[-3000:]}")

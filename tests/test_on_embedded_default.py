"""Behaviours that must hold on both backends, run again on the embedded default
(SQLite, as `make run` uses it): every query they make works there too.

The rerun starts in the background as the session begins (tests/conftest.py,
`pytest_collection_finish`); this test waits for its outcome."""

from __future__ import annotations

from tests.embedded import start_on_embedded_default

# Every test file whose code path makes queries of its own (ORM lookups, raw SQL,
# bulk writes, locking): the pure-rule and browser tests add nothing here.
ON_BOTH_BACKENDS = (
    "tests/test_terminate_on_this_host.py",
    "tests/test_forged_trial_facts.py",  # a result line never picks what is signalled
    "tests/test_agent_cannot_fake_gone.py",  # an agent's "gone" against Ray's view
    "tests/test_agent_commands_per_cluster.py",  # same-named nodes of two clusters
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
    "tests/test_first_ingest_copy.py",
    "tests/test_api_pagination.py",
    "tests/test_audit_trail.py",
    "tests/test_agent_tokens.py",  # an in-process ASGI server on the SQLite test database
    "tests/test_agent_token_admin.py",
    "tests/test_agent_hostile_values.py",  # SQLite ignores max_length: checked on decode
    "tests/test_metrics_export.py",
    "tests/test_cluster_sessions.py",
    "tests/test_digit_named_keys.py",  # JSON paths: SQLite's JSON_EXTRACT, not jsonb
)
TIMEOUT_S = 900


def test_passes_on_sqlite() -> None:
    # One pytest run for all of them: a Django start-up per file would double the time.
    code, output = start_on_embedded_default(*ON_BOTH_BACKENDS).wait(TIMEOUT_S)
    assert code == 0, f"on SQLite (exit {code}):\n{output[-10000:]}"
    assert " passed" in output.splitlines()[-1], output[-2000:]

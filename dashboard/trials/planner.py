"""Telling Postgres's planner about results stored in bulk.

Until the trial tables are analyzed, Postgres plans from statistics of the rows it saw
last time: after the first ingest of months of searches, the detectors' index-driven
trial query was planned as a scan of every trial (48 ms a poll at 100,000 trials,
against ~2 ms; bench/history_scale_bench.py). Autovacuum may be off, or a minute or
more away. So every writer of results (raywatch's own log reader, node agents' reports)
counts what it stored, and the tables are analyzed once that count reaches 10,000 or a
tenth of the table (autovacuum's own rule), whichever is more: a first ingest is
analyzed at once, and 1,000 results a second into a table of millions costs an ANALYZE
every few minutes, not every poll.
"""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError, connection

from dashboard.trials.models import StepResult, Trial

log = logging.getLogger("raywatch.trials")
ANALYZE_AFTER_RESULTS = 10_000
GROWTH = 0.1  # of the rows the last ANALYZE counted

_LOCK = threading.Lock()
_pending = {"results": 0, "threshold": 0}


def stored(results: int) -> bool:
    """Count results stored (after their transaction); True when this ANALYZEd."""
    if results <= 0 or connection.vendor != "postgresql":
        return False
    with _LOCK:
        _pending["results"] += results
        if _pending["results"] < max(ANALYZE_AFTER_RESULTS, _pending["threshold"]):
            return False
        _pending["results"] = 0
    try:
        rows = analyze_trial_tables()
    except DatabaseError as exc:  # statistics only: what was stored stays stored
        log.warning("ANALYZE of the trial tables failed: %s", exc)
        return False
    with _LOCK:
        _pending["threshold"] = int(rows * GROWTH)
    return True


def analyze_trial_tables() -> int:
    """ANALYZE the tables results go to; the rows it counted in StepResult's."""
    table = StepResult._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Trial._meta.db_table}, {table}")
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [table])
        row = cursor.fetchone()
    return max(0, int(row[0])) if row else 0

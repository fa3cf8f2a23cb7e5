"""Record how each collector source is doing, for the status strip.

A source that fails is retried at its next poll; it never stops the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from collectors.http import SourceError
from dashboard.core.bulk import upsert
from dashboard.core.models import SourceHealth
from dashboard.core.push import HEALTH_GROUP, publish

log = logging.getLogger(__name__)

SOURCES = ("ray", "nvml", "trial_logs")


@dataclass
class Poll:
    """What a poll may report besides success: a partial result."""

    warnings: list[str] = field(default_factory=list)


class FailureLog:
    """Logs a source's failure once, then again only when its reason changes (a GPU-less
    host's NVML source fails every second for the same reason: the status strip shows
    it all along); logs the recovery once. Per process: each poller logs for itself."""

    def __init__(self) -> None:
        self.reasons: dict[str, str] = {}

    def failed(self, name: str, reason: str, exc: Exception | None = None) -> None:
        if self.reasons.get(name) == reason:
            return
        self.reasons[name] = reason
        log.warning("%s poll failed: %s (logged again only when the reason changes)", name,
                    reason, exc_info=exc)

    def succeeded(self, name: str) -> None:
        if self.reasons.pop(name, None) is not None:
            log.info("%s poll works again", name)


failures = FailureLog()


@contextmanager
def source_poll(source: str, interval_s: float, scope: str = "") -> Iterator[Poll]:
    """Run one poll of a source; record success, a partial result or the error.

    Errors are recorded and logged (once per reason), not raised: the scheduler keeps
    polling.
    """
    poll = Poll()
    started = time.monotonic()
    error: str | None = None
    unexpected: Exception | None = None
    try:
        yield poll
    except SourceError as exc:
        error = exc.message
    except Exception as exc:
        error, unexpected = f"{type(exc).__name__}: {exc}", exc
    duration_ms = (time.monotonic() - started) * 1000
    name = f"{source}@{scope}" if scope else source
    if error:
        failures.failed(name, error, unexpected)
    else:
        failures.succeeded(name)
    try:
        record(source, scope, interval_s, duration_ms, error, poll.warnings)
    except Exception as exc:
        log.warning("cannot record %s health: %s", source, exc)


def record(
    source: str,
    scope: str,
    interval_s: float,
    duration_ms: float,
    error: str | None,
    warnings: list[str],
) -> SourceHealth:
    return record_many(source, interval_s, duration_ms, {scope: (error, warnings)})[scope]


def record_many(source: str, interval_s: float, duration_ms: float,
                outcomes: dict[str, tuple[str | None, list[str]]]) -> dict[str, SourceHealth]:
    """record() of many scopes of one source at once (the nodes of a group of agent
    reports): a read and an upsert for all of them, one push if any changed."""
    now = timezone.now()
    with transaction.atomic():
        rows = {row.scope: row for row in SourceHealth.objects.select_for_update().filter(
            source=source, scope__in=list(outcomes)).order_by("pk")}
        changed = False
        for scope, (error, warnings) in outcomes.items():
            row = rows.setdefault(scope, SourceHealth(source=source, scope=scope))
            before = (row.state, row.last_error)
            _apply(row, now, interval_s, duration_ms, error, warnings)
            changed |= (row.state, row.last_error) != before
        upsert(SourceHealth, list(rows.values()), ["source", "scope"], _HEALTH_FIELDS)
        if changed:
            publish(HEALTH_GROUP, "health", health_payload())
    return rows


_HEALTH_FIELDS = ("last_attempt_at", "last_success_at", "last_duration_ms", "interval_s",
                  "consecutive_failures", "state", "last_error")


def _apply(row: SourceHealth, now: datetime, interval_s: float, duration_ms: float,
           error: str | None, warnings: list[str]) -> None:
    row.last_attempt_at = now
    row.last_duration_ms = duration_ms
    row.interval_s = interval_s
    if error is None:
        row.last_success_at = now
        row.consecutive_failures = 0
        row.state = SourceHealth.DEGRADED if warnings else SourceHealth.HEALTHY
        row.last_error = "; ".join(warnings)
    else:
        row.consecutive_failures += 1
        row.last_error = error
        recent = row.last_success_at is not None
        limit = settings.HEALTH_DOWN_AFTER_FAILURES
        row.state = (
            SourceHealth.DEGRADED
            if recent and row.consecutive_failures < limit
            else SourceHealth.DOWN
        )


def effective_state(row: SourceHealth, now: datetime) -> tuple[str, str]:
    """The state to show, counting a poller that stopped polling as down."""
    if row.last_attempt_at is None:
        return SourceHealth.DOWN, "never polled"
    stale_after = timedelta(seconds=max(row.interval_s * 5, 30))
    if now - row.last_attempt_at > stale_after:
        ago = int((now - row.last_attempt_at).total_seconds())
        reason = f"no poll for {ago} s: is the scheduler (Celery beat/worker) running?"
        return SourceHealth.DOWN, reason
    return row.state, row.last_error


def health_payload() -> list[dict[str, Any]]:
    now = timezone.now()
    rows = {(r.source, r.scope): r for r in SourceHealth.objects.all()}
    out: list[dict[str, Any]] = []
    for source in SOURCES:
        scoped = [r for (s, _), r in rows.items() if s == source]
        if not scoped:
            out.append({"source": source, "scope": "", "label": source, "state": "unknown",
                        "reason": "not polled yet", "last_success_at": None,
                        "last_duration_ms": None})
    for row in rows.values():
        state, reason = effective_state(row, now)
        out.append({
            "source": row.source,
            "scope": row.scope,
            "label": row.label,
            "state": state,
            "reason": reason,
            "last_success_at": row.last_success_at.isoformat() if row.last_success_at else None,
            "last_duration_ms": row.last_duration_ms,
        })
    return sorted(out, key=lambda item: (item["source"], item["scope"]))

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from dashboard.core.health import source_poll
from dashboard.trials import lag
from dashboard.trials.detect import evaluate_trials
from dashboard.trials.ingest import IngestStats, ingest_logs
from dashboard.trials.push import flush_experiments, push_points, push_updates
from dashboard.trials.roots import log_roots
from dashboard.trials.stacks import take


@shared_task(name="dashboard.trials.tasks.poll_trial_logs")
def poll_trial_logs() -> None:
    """Read this host's log dirs (unless RAYWATCH_CENTRAL_LOGS=0: node agents send them)
    and evaluate the trials, however their results arrived."""
    stats = None
    with source_poll("trial_logs", settings.POLL_LOGS_S) as poll:
        if settings.CENTRAL_LOGS:
            roots = log_roots()
            if not any(root.is_dir() for root in roots):
                poll.warnings.append("no log directory exists yet: " + ", ".join(map(str, roots)))
            started = timezone.now()
            stats = ingest_logs(roots, started, on_stored=push_points)
            if not stats.busy:
                lag.note_read(started)
                took = (timezone.now() - started).total_seconds()
                if took > lag.behind_s():
                    poll.warnings.append(f"this poll of the log dirs took {took:.0f} s: until "
                                         "the next one, stalls are counted to what it read")
            else:
                lag.note_busy(started)
                poll.warnings.append("another raywatch process is still reading the log "
                                     "directories (a first ingest of a long history, say); "
                                     "this poll left the reading to it, and its stalls "
                                     "wait for what it reads")
    evaluation = evaluate_trials(timezone.now())
    push_updates(stats or IngestStats(), evaluated=evaluation["trials"])
    flush_experiments()


@shared_task(name="dashboard.trials.tasks.take_trial_stack")
def take_trial_stack(pk: int) -> None:
    take(pk)

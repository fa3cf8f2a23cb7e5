from __future__ import annotations

import threading

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from collectors.memory import give_back_after
from dashboard.core.background import run_soon
from dashboard.core.health import source_poll
from dashboard.core.locks import in_turn
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
            if not stats.busy:  # read to the end (lag.reading marked it, for all)
                took = (timezone.now() - started).total_seconds()
                if took > lag.behind_s():
                    poll.warnings.append(f"this poll of the log dirs took {took:.0f} s: until "
                                         "the next one, stalls are counted to what it read")
            else:
                poll.warnings.append("another raywatch process is still reading the log "
                                     "directories (a first ingest of a long history, say); "
                                     "this poll left the reading to it, and its stalls "
                                     "wait for what it reads")
    evaluate_and_push(stats or IngestStats())


# The detectors run one evaluation at a time, across processes too: a poll's and one an
# agent's report asked for (evaluate_soon) take turns.
EVALUATION_LOCK = 7_261_003  # pg advisory lock id: "raywatch trial evaluation"
_EVALUATING = threading.Lock()
_ASKED_KEY = "raywatch:trials:evaluation-asked"
ASKED_EXPIRES_S = 10  # an asked evaluation no worker took by then: the polls go on


def evaluate_and_push(stats: IngestStats) -> None:
    """Evaluate the trials, however their results arrived, and send what changed."""
    with _EVALUATING, in_turn(EVALUATION_LOCK):
        evaluation = evaluate_trials(timezone.now())
    push_updates(stats, evaluated=evaluation["trials"])
    flush_experiments()
    # A first ingest's peak, or a restart's pass over every trial dir, is not kept for
    # the server's life.
    give_back_after(max(stats.results, stats.dirs, evaluation["evaluated"]))


@shared_task(name="dashboard.trials.tasks.evaluate_reported")
def evaluate_reported() -> None:
    cache.delete(_ASKED_KEY)  # what is stored from now on asks for the next one
    evaluate_and_push(IngestStats())


def evaluate_soon() -> None:
    """Results an agent just reported reach the detectors now, not at the next poll: an
    evaluation in the background, unless one is asked for and not begun (a hundred nodes
    reporting at once ask for one, not a hundred)."""
    if cache.add(_ASKED_KEY, 1, timeout=ASKED_EXPIRES_S):
        run_soon(evaluate_reported, expires=ASKED_EXPIRES_S)


@shared_task(name="dashboard.trials.tasks.take_trial_stack")
def take_trial_stack(pk: int) -> None:
    take(pk)

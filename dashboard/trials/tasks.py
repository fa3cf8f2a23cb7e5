from __future__ import annotations

import json
from pathlib import Path

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from collectors.logscan import default_log_dirs
from dashboard.core.health import source_poll
from dashboard.core.push import publish
from dashboard.trials.detect import evaluate_trials
from dashboard.trials.ingest import IngestStats, ingest_logs
from dashboard.trials.models import Trial
from dashboard.trials.views_data import experiments_payload, trial_rows

EXPERIMENTS_GROUP = "experiments"


def log_roots() -> list[Path]:
    if settings.LOG_DIRS:
        return [Path(p).expanduser() for p in settings.LOG_DIRS]
    roots = default_log_dirs(Path.home(), settings.RAY_TMP_DIR)
    try:  # the cluster `make run` started may not be the newest session on this host
        session = json.loads(settings.LOCAL_RAY_FILE.read_text())["session_dir"]
        roots.append(Path(session) / "artifacts")
    except (OSError, ValueError, KeyError):
        pass
    return roots


@shared_task(name="dashboard.trials.tasks.poll_trial_logs")
def poll_trial_logs() -> None:
    stats = None
    with source_poll("trial_logs", settings.POLL_LOGS_S) as poll:
        roots = log_roots()
        if not any(root.is_dir() for root in roots):
            poll.warnings.append("no log directory exists yet: " + ", ".join(map(str, roots)))
        stats = ingest_logs(roots, timezone.now())
    evaluation = evaluate_trials(timezone.now())
    if (stats and (stats.changed_trials or evaluation["status_changes"])) or any(
        evaluation[k] for k in ("opened", "resolved", "updated")
    ):
        push_updates(stats or IngestStats(), all_changed=bool(evaluation["status_changes"]
                                                               or evaluation["opened"]
                                                               or evaluation["resolved"]))


def push_updates(stats: IngestStats, all_changed: bool = False) -> None:
    """Send changed trial rows and new points to the pages that show them."""
    with transaction.atomic():
        query = Trial.objects.select_related("experiment")
        trials = list(query.exclude(status__in=Trial.FINISHED) if all_changed
                      else query.filter(pk__in=stats.changed_trials))
        if all_changed:
            trials += list(query.filter(pk__in=stats.changed_trials).filter(
                status__in=Trial.FINISHED))
        rows = json.loads(json.dumps(trial_rows(trials), default=str))
        by_experiment: dict[int, list] = {}
        for row in rows:
            by_experiment.setdefault(row["experiment_id"], []).append(row)
            publish(f"trial-{row['id']}", "trial", row)
        for exp_id, exp_rows in by_experiment.items():
            publish(f"experiment-{exp_id}", "trials", exp_rows)
        for trial_pk, points in stats.new_points.items():
            publish(f"trial-{trial_pk}", "points", points)
        publish(EXPERIMENTS_GROUP, "experiments", experiments_payload())

"""Live updates of trials to the pages that show them, sent after what they show was
stored: by the periodic poll (tasks.py) and by a node agent's report (the agents app)."""

from __future__ import annotations

import json
from datetime import datetime

from django.db import transaction
from django.db.models import Q

from dashboard.core.push import EXPERIMENTS_GROUP, experiment_group, publish, trial_group
from dashboard.trials.models import Trial
from dashboard.trials.objective import objectives_by_experiment
from dashboard.trials.store import IngestStats
from dashboard.trials.views_data import experiments_payload, incidents_payload, trial_rows


def push_updates(stats: IngestStats, all_changed: bool = False,
                 saved_since: datetime | None = None) -> None:
    """Send changed trial rows and new points to the pages that show them. all_changed:
    incidents opened or resolved, or statuses changed; every unfinished trial, the
    changed ones and those saved since `saved_since` (a trial that just ended) go out."""
    with transaction.atomic():
        query = Trial.objects.select_related("experiment")
        trials = list(query.exclude(status__in=Trial.FINISHED) if all_changed
                      else query.filter(pk__in=stats.changed_trials))
        if all_changed:
            changed = Q(pk__in=stats.changed_trials)
            if saved_since is not None:
                changed |= Q(updated_at__gte=saved_since)
            trials += list(query.filter(changed, status__in=Trial.FINISHED))
        rows = json.loads(json.dumps(trial_rows(trials), default=str))
        by_experiment: dict[int, list] = {}
        for row in rows:
            by_experiment.setdefault(row["experiment_id"], []).append(row)
            publish(trial_group(row["id"]), "trial", row)
        for exp_id, objective in objectives_by_experiment(trials).items():
            publish(experiment_group(exp_id), "objective", objective.as_dict())
            publish(experiment_group(exp_id), "trials", by_experiment[exp_id])
        if all_changed:  # incidents opened or resolved: the trial pages list them
            for pk, incidents in incidents_payload([t.pk for t in trials]).items():
                publish(trial_group(pk), "incidents", incidents)
        for trial_pk, points in stats.new_points.items():
            publish(trial_group(trial_pk), "points", points)
        publish(EXPERIMENTS_GROUP, "experiments", experiments_payload())

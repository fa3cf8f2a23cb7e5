"""Data for the trial pages, the API and the pushes: one function per view of it."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from django.db.models import Count
from rest_framework.utils.encoders import JSONEncoder

from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, StepResult, Trial
from dashboard.trials.serializers import (
    ExperimentSerializer,
    StepResultSerializer,
    trial_rows,
)


def jsonable(data: Any) -> Any:
    return json.loads(json.dumps(data, cls=JSONEncoder))


def experiments_payload() -> list[dict[str, Any]]:
    experiments = list(Experiment.objects.annotate(trial_count=Count("trials")))
    statuses: dict[int, Counter[str]] = {}
    for exp_id, status in Trial.objects.values_list("experiment_id", "status"):
        statuses.setdefault(exp_id, Counter())[status] += 1
    firing = Counter(
        Incident.objects.filter(state=Incident.FIRING, trial__isnull=False)
        .values_list("trial__experiment_id", flat=True)
    )
    for exp in experiments:
        exp.by_status = dict(statuses.get(exp.pk, {}))  # type: ignore[attr-defined]
        exp.firing = firing.get(exp.pk, 0)  # type: ignore[attr-defined]
    return jsonable(ExperimentSerializer(experiments, many=True).data)


def experiment_trials_payload(experiment: Experiment) -> list[dict[str, Any]]:
    trials = list(experiment.trials.select_related("experiment").all())
    return jsonable(trial_rows(trials))


def trial_payload(trial: Trial) -> dict[str, Any]:
    return jsonable(trial_rows([trial])[0])


def results_payload(trial: Trial, limit: int = 20_000) -> list[dict[str, Any]]:
    rows = StepResult.objects.filter(trial=trial).order_by("attempt", "iteration")[:limit]
    return jsonable(StepResultSerializer(rows, many=True).data)

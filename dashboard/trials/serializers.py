from __future__ import annotations

from typing import Any

from rest_framework import serializers

from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, StepResult, Trial

# A trial's health is its worst firing incident, in this order.
HEALTH_ORDER = ("trial_process_gone", "trial_stalled", "trial_errored", "step_time_regression")
HEALTH_NAMES = {"trial_process_gone": "process gone", "trial_stalled": "stalled",
                "trial_errored": "errored", "step_time_regression": "slow"}


def health_by_trial(trial_pks: list[int]) -> dict[int, str]:
    kinds: dict[int, set[str]] = {}
    for trial_id, kind in Incident.objects.filter(
        state=Incident.FIRING, trial_id__in=trial_pks
    ).values_list("trial_id", "kind"):
        kinds.setdefault(trial_id, set()).add(kind)
    return {
        pk: next((HEALTH_NAMES[k] for k in HEALTH_ORDER if k in found), "ok")
        for pk, found in kinds.items()
    }


class TrialSerializer(serializers.ModelSerializer):
    experiment = serializers.CharField(source="experiment.name")
    experiment_id = serializers.IntegerField()
    last_result_at = serializers.DateTimeField(allow_null=True)
    health = serializers.SerializerMethodField()

    class Meta:
        model = Trial
        fields = [
            "id", "trial_id", "experiment", "experiment_id", "status", "status_reason",
            "tune_status", "iteration", "attempt", "last_result_at", "pid", "node_ip",
            "hostname", "health", "best_value", "last_metrics", "last_step_s",
            "process_alive", "parse_errors", "last_parse_error", "error_text", "trainable",
            "config",
        ]

    def get_health(self, trial: Trial) -> str:
        health: dict[int, str] = self.context.get("health") or {}
        return health.get(trial.pk, "ok")


class StepResultSerializer(serializers.ModelSerializer):
    class Meta:
        model = StepResult
        fields = ["attempt", "iteration", "at", "time_this_iter_s", "metrics"]


class ExperimentSerializer(serializers.ModelSerializer):
    trials = serializers.IntegerField(source="trial_count")
    by_status = serializers.DictField(child=serializers.IntegerField())
    firing = serializers.IntegerField()

    class Meta:
        model = Experiment
        fields = ["id", "name", "kind", "metric", "mode", "trials", "by_status", "firing",
                  "updated_at"]


def trial_rows(trials: list[Trial]) -> list[dict[str, Any]]:
    health = health_by_trial([t.pk for t in trials])
    return list(TrialSerializer(trials, many=True, context={"health": health}).data)

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from dashboard.cluster.models import Cluster
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, StepResult, Trial
from dashboard.trials.objective import Objective, best, objective_of, objectives_by_experiment

# A trial's health is its worst firing incident, in this order (its page, the experiment's
# table, the home page's triage).
# call_overdue: an RL run's step waits on a Ray call past its usual time (gpus/detect.py
# ties the incident to the run).
# demand_*: the placement group or actor an RL run's job waits on (gpus/detect.py too).
HEALTH_ORDER = ("trial_process_gone", "call_overdue", "trial_stalled", "trial_errored",
                "demand_infeasible", "demand_pending", "step_time_regression")
HEALTH_NAMES = {"trial_process_gone": "process gone", "call_overdue": "call overdue",
                "trial_stalled": "stalled", "trial_errored": "errored",
                "demand_infeasible": "cannot be placed", "demand_pending": "waiting for resources",
                "step_time_regression": "slow"}


def health_by_trial(trial_pks: list[int]) -> dict[int, list[str]]:
    """Each trial's firing trial incidents by name, worst first (absent: healthy)."""
    kinds: dict[int, set[str]] = {}
    for trial_id, kind in Incident.objects.filter(
        state=Incident.FIRING, trial_id__in=trial_pks
    ).values_list("trial_id", "kind"):
        kinds.setdefault(trial_id, set()).add(kind)
    return {pk: [HEALTH_NAMES[k] for k in HEALTH_ORDER if k in found]
            for pk, found in kinds.items()}


class TrialSerializer(serializers.ModelSerializer):
    cluster = serializers.SerializerMethodField(help_text="the cluster it ran on (its name)")
    experiment = serializers.CharField(source="experiment.name")
    experiment_id = serializers.IntegerField()
    last_result_at = serializers.DateTimeField(allow_null=True)
    health = serializers.SerializerMethodField(
        help_text="the worst firing incident: process gone, call overdue (an RL run's), "
        "stalled, errored, cannot be placed or waiting for resources (an RL run's job), "
        "slow; or ok")
    health_all = serializers.SerializerMethodField(
        help_text="every firing incident of the trial, worst first (e.g. stalled, slow)")
    best_value = serializers.SerializerMethodField(
        help_text="the trial's best result of the search's metric, by its mode")
    terminated_by = serializers.CharField(
        source="ended_by", help_text="who terminated its current attempt through raywatch "
        "(its ERROR is that kill, and raises no alert); empty otherwise")
    metric_range = serializers.DictField(
        child=serializers.ListField(child=serializers.FloatField(), min_length=2,
                                    max_length=2),
        help_text="each metric's [lowest, highest] over all the trial's results")

    class Meta:
        model = Trial
        fields = [
            "id", "cluster", "trial_id", "experiment", "experiment_id", "status", "status_reason",
            "tune_status", "iteration", "attempt", "last_result_at", "pid", "node_ip",
            "hostname", "health", "health_all", "best_value", "metric_range", "last_metrics",
            "last_step_s", "process_alive", "parse_errors", "last_parse_error", "error_text",
            "trainable", "config", "terminated_by", "framework",
        ]
        extra_kwargs = {"framework": {"help_text": "what wrote its files: tune, verl, easyr1, "
                                                   "openrlhf, tensorboard or raytrain "
                                                   "(raywatch's Ray Train callback)"}}

    def get_cluster(self, trial: Trial) -> str:
        names: dict[int, str] = self.context.get("clusters") or {}
        cluster_id = trial.experiment.cluster_id
        name = names.get(cluster_id)  # else one query: a serializer given no names
        return name if name is not None else trial.experiment.cluster.name

    def get_health_all(self, trial: Trial) -> list[str]:
        health: dict[int, list[str]] = self.context.get("health") or {}
        return health.get(trial.pk, [])

    def get_health(self, trial: Trial) -> str:
        return next(iter(self.get_health_all(trial)), "ok")

    def get_best_value(self, trial: Trial) -> float | None:
        objectives: dict[int, Objective] = self.context.get("objectives") or {}
        found = objectives.get(trial.experiment_id) or objective_of(trial.experiment)
        return best(trial, found.metric, found.mode)


class StepResultSerializer(serializers.ModelSerializer):
    class Meta:
        model = StepResult
        fields = ["attempt", "iteration", "at", "time_this_iter_s", "metrics"]


class ExperimentSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    trials = serializers.IntegerField(source="trial_count")
    by_status = serializers.DictField(child=serializers.IntegerField())
    firing = serializers.IntegerField()
    updated_at = serializers.DateTimeField(
        source="last_activity", help_text="when one of its trials (or it) last changed")
    frameworks = serializers.ListField(
        child=serializers.CharField(),
        help_text="what wrote its trials' files (tune, verl, easyr1, openrlhf, tensorboard, "
                  "raytrain)")

    class Meta:
        model = Experiment
        fields = ["id", "cluster", "name", "kind", "frameworks", "metric", "mode", "trials",
                  "by_status", "firing", "updated_at"]


def trial_rows(trials: list[Trial], objectives: dict[int, Objective] | None = None
               ) -> list[dict[str, Any]]:
    """The rows of `trials`; `objectives`: each experiment's, when the caller knows it
    from all its trials (else guessed from these)."""
    context = {"health": health_by_trial([t.pk for t in trials]),
               "objectives": objectives if objectives is not None
               else objectives_by_experiment(trials),
               "clusters": dict(Cluster.objects.values_list("pk", "name"))}
    return list(TrialSerializer(trials, many=True, context=context).data)

from __future__ import annotations

from typing import Any

from dashboard.core.consumers import LiveConsumer
from dashboard.core.push import EXPERIMENTS_GROUP, experiment_group, trial_group
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.stacks import latest_stack, stack_payload
from dashboard.trials.views_data import (
    experiment_payload,
    experiments_payload,
    incidents_payload,
    results_payload,
    trial_payload,
)


class ExperimentsConsumer(LiveConsumer):
    topics = (EXPERIMENTS_GROUP,)

    def page_snapshot(self) -> dict[str, Any]:
        return {"experiments": experiments_payload(self.cluster or None)}


class ExperimentConsumer(LiveConsumer):
    def page_topics(self) -> tuple[str, ...]:
        return (experiment_group(int(self.url_kwarg("pk"))),)

    def page_snapshot(self) -> dict[str, Any]:
        experiment = Experiment.objects.filter(pk=int(self.url_kwarg("pk"))).first()
        if experiment is None:
            return {"trials": []}
        payload = experiment_payload(experiment)
        return {"objective": payload["objective"], "trials": payload["trials"]}


class TrialConsumer(LiveConsumer):
    def page_topics(self) -> tuple[str, ...]:
        return (trial_group(int(self.url_kwarg("pk"))),)

    def page_snapshot(self) -> dict[str, Any]:
        trial = Trial.objects.select_related("experiment").filter(
            pk=int(self.url_kwarg("pk"))).first()
        if trial is None:
            return {}
        # "results" replaces what the page holds: nothing is missed across a reconnect.
        return {"trial": trial_payload(trial), "results": results_payload(trial),
                "stack": stack_payload(latest_stack(trial)),
                "incidents": incidents_payload([trial.pk])[trial.pk]}

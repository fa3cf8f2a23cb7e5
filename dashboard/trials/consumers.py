from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from collectors.records import RAYTRAIN
from collectors.runformats import run_job_id
from dashboard.core.consumers import LiveConsumer
from dashboard.core.push import (
    EXPERIMENTS_GROUP,
    experiment_group,
    job_group,
    train_group,
    trial_group,
)
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.objective import objective_of
from dashboard.trials.stacks import latest_stack, stack_payload
from dashboard.trials.table import MAX_PAGE_SIZE, columns_of
from dashboard.trials.views_data import (
    experiments_payload,
    incidents_payload,
    results_payload,
    run_calls_payload,
    run_job,
    train_run_payload,
    trial_payload,
)


class ExperimentsConsumer(LiveConsumer):
    topics = (EXPERIMENTS_GROUP,)

    def page_snapshot(self) -> dict[str, Any]:
        return {"experiments": experiments_payload(self.cluster or None)}


class ExperimentConsumer(LiveConsumer):
    """The experiment page shows a page of its trials, paged on the server: the page says
    which (a "watch" message with their ids) and gets only their rows; of the others it
    is told how many changed (`others`), and fetches its page again when that matters.
    On (re)connect the snapshot's empty `trials` asks the page to fetch its rows."""

    watched: frozenset[int] = frozenset()

    def page_topics(self) -> tuple[str, ...]:
        return (experiment_group(int(self.url_kwarg("pk"))),)

    def page_snapshot(self) -> dict[str, Any]:
        experiment = Experiment.objects.filter(pk=int(self.url_kwarg("pk"))).first()
        if experiment is None:
            return {"trials": []}
        return {"objective": objective_of(experiment, columns_of(experiment).metrics).as_dict(),
                "trials": []}

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "watch":
            ids = content.get("ids")
            if isinstance(ids, list):
                self.watched = frozenset(i for i in ids[:MAX_PAGE_SIZE] if isinstance(i, int))
            return
        await super().receive_json(content, **kwargs)

    async def push(self, event: dict[str, Any]) -> None:
        if event["topic"] != "trials":
            await super().push(event)
            return
        rows = event["data"]
        shown = [row for row in rows if row.get("id") in self.watched]
        await self.send_json({"topic": "trials", "data": shown,
                              "others": len(rows) - len(shown)})


class TrialConsumer(LiveConsumer):
    """A trial's page; an RL run's also hears its trainer's job's calls (what its step
    is doing now), as the job was when the socket opened (a run that binds later shows
    them from its next reconnect or reload), and a Ray Train run its listing (status,
    attempts, workers) as it changes."""

    job_topics: tuple[str, ...] = ()

    def page_topics(self) -> tuple[str, ...]:
        return (trial_group(int(self.url_kwarg("pk"))), *self.job_topics)

    async def join_groups(self) -> None:
        self.job_topics = await database_sync_to_async(self._job_topics)()
        await super().join_groups()

    def _job_topics(self) -> tuple[str, ...]:
        trial = Trial.objects.select_related("experiment").filter(
            pk=int(self.url_kwarg("pk"))).first()
        if trial is None:
            return ()
        job = run_job(trial)
        train = ((train_group(trial.experiment.cluster_id,
                              run_job_id(trial.experiment.name), trial.trial_id),)
                 if trial.framework == RAYTRAIN else ())
        return (*((job_group(*job),) if job else ()), *train)

    def page_snapshot(self) -> dict[str, Any]:
        trial = Trial.objects.select_related("experiment").filter(
            pk=int(self.url_kwarg("pk"))).first()
        if trial is None:
            return {}
        # "results" replaces what the page holds: nothing is missed across a reconnect.
        return {"trial": trial_payload(trial), "results": results_payload(trial),
                "stack": stack_payload(latest_stack(trial)),
                "incidents": incidents_payload([trial.pk])[trial.pk],
                **({"calls": calls} if (calls := run_calls_payload(trial)) is not None else {}),
                **({"train": train} if (train := train_run_payload(trial)) is not None else {})}

"""A run found from its job (`driver <pid>`, before its trainer exists) is taken over by
its trainer once Ray lists it, as one row, even when the trainer's console spoke first
(its node's agent sent its lines before Ray's poll listed the actor, so the trainer's row
exists already): the job's row's incidents move to the trainer's and that row goes.
Before, renaming it onto the trainer's broke the unique key, and every detector pass
after failed (test_console_runs' OpenRLHF run, seen in a full run)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from collectors.records import OPENRLHF
from dashboard.cluster.models import Actor, Node, settings_cluster_pk
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.runs import discover_runs

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


@pytest.mark.parametrize("console_first", [False, True])
def test_the_trainer_takes_its_jobs_run_over_as_one_row(console_first: bool) -> None:
    now, cluster = timezone.now(), settings_cluster_pk()
    Node.objects.create(cluster_id=cluster, node_id="n1", node_ip="10.0.0.5", state="ALIVE",
                        hostname="gpu-5", last_seen_at=now)
    run = Experiment.objects.create(cluster_id=cluster, name="job 0a000000",
                                    kind=Experiment.CONSOLE, paths=[])
    waiting = Trial.objects.create(experiment=run, trial_id="driver 900", framework=OPENRLHF,
                                   status=Trial.PENDING)
    demand = Incident.objects.create(kind="demand_infeasible", subject="demand:pg",
                                     summary="cannot be placed", trial=waiting,
                                     opened_at=now, updated_at=now)
    if console_first:  # its console's first line, sent by its node's agent
        Trial.objects.create(experiment=run, trial_id="PPOTrainer 4242", framework=OPENRLHF)
    Actor.objects.create(cluster_id=cluster, actor_id="a" * 32, class_name="PPOTrainer",
                         state="ALIVE", pid=4242, job_id="0a000000", node_id="n1",
                         first_seen_at=now, updated_at=now)

    discover_runs(None)

    [trainer] = Trial.objects.filter(experiment=run)
    assert (trainer.trial_id, trainer.pid, trainer.node_ip) == ("PPOTrainer 4242", 4242,
                                                               "10.0.0.5")
    assert trainer.status == Trial.RUNNING
    assert Incident.objects.get(pk=demand.pk).trial_id == trainer.pk

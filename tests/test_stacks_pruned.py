"""Stacks do not pile up for ever (issue 43, L6): past RAYWATCH_STACKS_KEEP_D the stack
commands (a py-spy dump each), overdue calls' stacks and stalled trials' older stacks
are deleted; a trial's newest stack stays (its page shows it), and so does any command
still live."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.agents.commands import create_stack
from dashboard.agents.models import AgentCommand
from dashboard.agents.tasks import prune_stacks
from dashboard.cluster.models import CallStack, settings_cluster_pk
from dashboard.trials.models import Experiment, Trial, TrialStack

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def test_old_stacks_and_their_commands_go_and_a_trials_newest_stays(settings) -> None:  # type: ignore[no-untyped-def]
    settings.STACKS_KEEP_D = 7
    now = timezone.now()
    old, recent = now - timedelta(days=8), now - timedelta(days=1)
    experiment = Experiment.objects.create(name="search")
    quiet, busy = (Trial.objects.create(experiment=experiment, trial_id=f"ab12c_0000{n}")
                   for n in (1, 2))
    for at in (old - timedelta(hours=2), old - timedelta(hours=1), old):
        TrialStack.objects.create(trial=quiet, requested_at=at)
    TrialStack.objects.create(trial=busy, requested_at=old)
    kept_busy = TrialStack.objects.create(trial=busy, requested_at=recent)
    cluster = settings_cluster_pk()
    for task, at in (("old-call", old), ("new-call", recent)):
        CallStack.objects.create(cluster_id=cluster, task_id=task, name="Reward.compute",
                                 pid=1, requested_at=at)
    done_old = create_stack("gpu-1", 7, 1.0, old)
    AgentCommand.objects.filter(pk=done_old.pk).update(done_at=old, result="x" * 100_000)
    create_stack("gpu-1", 8, 1.0, recent)
    create_stack("gpu-1", 9, 1.0, old)  # never fetched: long expired
    live = create_stack("gpu-1", 10, 1.0, now)

    pruned = prune_stacks()

    assert pruned == {"commands": 2, "call_stacks": 1, "trial_stacks": 3}, pruned
    newest_quiet = TrialStack.objects.filter(trial=quiet).get()
    assert newest_quiet.requested_at == old  # its only stack now, though old: its page's
    assert set(TrialStack.objects.filter(trial=busy).values_list("pk", flat=True)) == {
        kept_busy.pk}
    assert list(CallStack.objects.values_list("task_id", flat=True)) == ["new-call"]
    assert sorted(AgentCommand.objects.values_list("payload__pid", flat=True)) == [8, 10]
    assert AgentCommand.objects.filter(pk=live.pk).exists()

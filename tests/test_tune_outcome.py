"""The terminate action's last step, what Tune made of the trial: Tune writes error.txt
before it decides whether to retry, so a trial errored by its error.txt alone is watched
(up to 20 s) for a retry; once Tune's experiment state says ERROR, which Tune writes only
for a trial it will not retry (docs/ray-facts.md), the step ends at once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dashboard.actions import executor
from dashboard.trials.models import Trial
from tests.test_terminate_on_this_host import hung_trial

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch):  # type: ignore[no-untyped-def]
    """executor's time: each sleep moves it on, and is counted; `then` runs at a sleep."""
    now = SimpleNamespace(t=0.0, sleeps=0, then={})

    def sleep(seconds: float) -> None:
        now.sleeps += 1
        now.t += seconds
        if action := now.then.pop(now.sleeps, None):
            action()

    monkeypatch.setattr(executor, "time", SimpleNamespace(monotonic=lambda: now.t, sleep=sleep))
    return now


def target(trial: Trial) -> dict:
    return {"trial_pk": trial.pk, "attempt": trial.attempt}


def test_tunes_own_error_ends_the_step_at_once(clock) -> None:  # type: ignore[no-untyped-def]
    trial = hung_trial(4242, ray=False)
    t = target(trial)
    Trial.objects.filter(pk=trial.pk).update(status=Trial.ERROR, tune_status=Trial.ERROR)
    assert executor.tune_outcome(t) == ("errored", "Tune marked the trial ERROR")
    assert clock.sleeps == 0


def test_an_error_txt_alone_is_watched_for_a_retry(clock) -> None:  # type: ignore[no-untyped-def]
    trial = hung_trial(4242, ray=False)
    t = target(trial)
    # error.txt read, Tune's state not yet written: raywatch's status is ERROR, Tune's not.
    Trial.objects.filter(pk=trial.pk).update(status=Trial.ERROR, tune_status=Trial.RUNNING)
    clock.then[3] = lambda: Trial.objects.filter(pk=trial.pk).update(attempt=t["attempt"] + 1)
    assert executor.tune_outcome(t) == ("retried", f"Tune retried the trial: attempt "
                                                   f"{t['attempt'] + 1}")
    assert clock.sleeps == 3

    Trial.objects.filter(pk=trial.pk).update(attempt=t["attempt"])  # no retry this time
    clock.sleeps, clock.t = 0, 0.0
    assert executor.tune_outcome(t, wait_s=20) == ("errored", "Tune marked the trial ERROR")
    assert clock.sleeps == 40  # the whole 20 s
    clock.sleeps, clock.t = 0, 0.0
    clock.then[5] = lambda: Trial.objects.filter(pk=trial.pk).update(tune_status=Trial.ERROR)
    assert executor.tune_outcome(t, wait_s=20) == ("errored", "Tune marked the trial ERROR")
    assert clock.sleeps == 5  # as soon as Tune's state said so

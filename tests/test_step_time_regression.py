"""step_time_regression as a pure rule, time moved by hand: a phase that stays slow is
judged against its timings from before the slowdown and keeps firing until it is fast
again; scheduler jitter raises nothing (a factor AND an excess in seconds, held for a
while); a hang is one incident (the stall supersedes the step-in-progress regression)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from dashboard.incidents.findings import Finding
from dashboard.incidents.trial_rules import (
    Baseline,
    StepTiming,
    Thresholds,
    TrialSnapshot,
    evaluate_trial,
    median_interval_s,
    needs_verdict,
    sample_after_s,
    slow_limit,
    stall_limit_s,
    step_time_regression,
    trial_stalled,
)
from dashboard.trials.detect import thresholds

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
# The shipped thresholds, as the detector builds them from settings: the scenarios below
# (a 0.5 s step, jitter of 1.7 s and 2.4 s, a 10x slowdown) are held against them.
TH = thresholds()
GEN_S = 0.2
STEP_S = GEN_S + 0.3  # a healthy step, and the interval between its results


def run(rewards: list[float], start: datetime = T0) -> list[StepTiming]:
    """Steps back to back: each takes gen + reward seconds and reports at its end."""
    steps, at = [], start
    for i, reward in enumerate(rewards, start=1):
        at += timedelta(seconds=GEN_S + reward)
        steps.append(StepTiming(i, at, GEN_S + reward,
                                {"timing_s/gen": GEN_S, "timing_s/reward": reward}))
    return steps


def snapshot(steps: list[StepTiming], baseline: Baseline | None = None) -> TrialSnapshot:
    return TrialSnapshot(trial_id="abcde_00001", experiment="exp", status="RUNNING",
                         process_alive=True, process_gone_since=None,
                         last_result_at=steps[-1].at, steps=steps[-(TH.slow_window + 1):],
                         slow_baseline=baseline)


def watch(steps: list[StepTiming], th: Thresholds = TH, every_s: float = 0.25
          ) -> Iterator[tuple[datetime, int, Finding | None]]:
    """Evaluate as the detector does, every `every_s`: the firing incident keeps the
    baseline it opened with and hands it back at the next evaluation."""
    kept: Baseline | None = None
    now, done = steps[3].at, 4
    while now <= steps[-1].at:
        while done < len(steps) and steps[done].at <= now:
            done += 1
        found = step_time_regression(snapshot(steps[:done], kept), th, now)
        kept = Baseline.from_details(found.details) if found else None
        yield now, done, found
        now += timedelta(seconds=every_s)


def test_a_phase_that_stays_ten_times_slower_fires_until_it_is_fast_again() -> None:
    steps = run([0.3] * 20 + [3.0] * 50 + [0.3] * 10)
    assert slow_limit(0.3, TH) < 3.0, "the shipped thresholds no longer call 10x slow"
    slowed_at = steps[19].at
    seen = list(watch(steps))
    firing = [(now, done, f) for now, done, f in seen if f]
    assert firing, "50 steps ten times slower opened nothing"
    first_at = firing[0][0]
    # Held for slow_for_s after the first slow step overran, not longer.
    hold, overran = TH.slow_for_s, slow_limit(STEP_S, TH)
    assert hold <= (first_at - slowed_at).total_seconds() <= hold + overran + 0.5
    # From then on it fires at every evaluation while the phase is slow...
    while_slow = [f for now, done, f in seen if first_at <= now and done <= 70]
    assert while_slow and all(while_slow), "resolved while the phase was still slow"
    # ...against the timing from before the slowdown, not a median that absorbed it.
    assert {f.details["median_s"] for f in while_slow if f.details["phase"] != "step total"} \
        == {0.3}
    last = while_slow[-1]
    assert last.details["phase"] == "timing_s/reward" and last.details["factor"] == 10.0
    assert "usual 0.3 s" in last.summary
    # The first fast step resolves it.
    after = [f for now, done, f in seen if done > 70]
    assert after and not any(after)


def test_the_baseline_is_taken_from_before_the_first_slow_step() -> None:
    steps = run([0.3] * 20 + [3.0] * 12)
    # Most of the window is slow: its median alone would call 3.0 s usual.
    assert (TH.slow_window + 1) // 2 < 12
    found = step_time_regression(snapshot(steps), TH, steps[-1].at)
    assert found is not None
    assert found.details["median_s"] == 0.3
    assert found.details["baseline_s"]["timing_s/reward"] == 0.3
    began = datetime.fromisoformat(found.details["since"])
    # When the first slow step overran its limit (slow_factor x 0.5 s, or 0.5 s +
    # slow_min_excess_s), not when it ended.
    assert began == steps[19].at + timedelta(seconds=slow_limit(STEP_S, TH))


def test_a_kept_baseline_does_not_drift() -> None:
    steps = run([0.3] * 20 + [3.0] * 60)
    kept = Baseline(steps[19].at, {"timing_s/reward": 0.3, "timing_s/gen": 0.2,
                                   "step total": 0.5, "step interval": 0.5})
    # The last 21 steps are all slow: without the kept baseline nothing looks unusual.
    assert step_time_regression(snapshot(steps), TH, steps[-1].at) is None
    found = step_time_regression(snapshot(steps, kept), TH, steps[-1].at)
    assert found and found.details["phase"] == "timing_s/reward"
    assert found.details["since"] == steps[19].at.isoformat()


def test_scheduler_jitter_on_short_steps_raises_nothing() -> None:
    # Healthy steps every 0.5 s, with pauses of 1.7 s and 2.4 s between results.
    rewards = [0.3] * 20 + [1.5] + [0.3] * 10 + [2.2] + [0.3] * 10 + [1.5, 1.5] + [0.3] * 10
    steps = run(rewards)
    assert not any(f for _, _, f in watch(steps))
    # The excess alone filters it, even with no hold time...
    assert not any(f for _, _, f in watch(steps, th=_with(slow_for_s=0)))
    # ...and the hold alone filters a single slow step, even a large one.
    spike = run([0.3] * 20 + [8.0] + [0.3] * 20)
    assert not any(f for _, _, f in watch(spike, th=_with(slow_min_excess_s=0)))
    # Without either, the same jitter would have opened a warning.
    assert any(f for _, _, f in watch(steps, th=_with(slow_for_s=0, slow_min_excess_s=0)))


def test_a_real_slowdown_waits_for_the_hold_time() -> None:
    steps = run([0.3] * 20 + [4.0] * 20)
    began = steps[19].at + timedelta(seconds=slow_limit(STEP_S, TH))
    hold = timedelta(seconds=TH.slow_for_s)

    def at(now: datetime) -> Finding | None:
        seen = [s for s in steps if s.at is not None and s.at <= now]
        return step_time_regression(snapshot(seen), TH, now)

    assert at(began + hold - timedelta(seconds=1)) is None
    assert at(began + hold + timedelta(seconds=1))


def test_a_hang_is_one_incident_the_stall() -> None:
    steps = run([0.3] * 20)
    hung = snapshot(steps)
    th = _with(slow_for_s=0)
    # Overran, but its stacks are not sampled yet (evidence first): nothing opens.
    early = steps[-1].at + timedelta(seconds=slow_limit(STEP_S, th) + 1)
    assert evaluate_trial(hung, th, early) == []
    # Past the time its stacks are sampled, none came (no agent): the step in progress.
    soon = steps[-1].at + timedelta(seconds=max(slow_limit(STEP_S, th),
                                                sample_after_s(hung, th)) + 1)
    [regression] = evaluate_trial(hung, th, soon)  # the step in progress overran
    assert regression.kind == "step_time_regression" and regression.details["in_progress"]
    late = steps[-1].at + timedelta(seconds=stall_limit_s(median_interval_s(steps), th) + 1)
    assert [f.kind for f in evaluate_trial(hung, th, late)] == ["trial_stalled"]


def test_a_regression_of_completed_steps_stays_beside_the_stall() -> None:
    steps = run([0.3] * 20 + [4.0] * 3)
    th = _with(slow_for_s=0)
    late = steps[-1].at + timedelta(seconds=stall_limit_s(median_interval_s(steps), th) + 1)
    kinds = {f.kind: f for f in evaluate_trial(snapshot(steps), th, late)}
    assert set(kinds) == {"trial_stalled", "step_time_regression"}
    assert kinds["step_time_regression"].details["in_progress"] is False
    assert kinds["step_time_regression"].details["phase"] == "timing_s/reward"


def _with(**changes: float) -> Thresholds:
    from dataclasses import replace

    return replace(TH, **changes)


def test_a_validation_or_checkpoint_step_is_held_to_the_usual_step_without_it() -> None:
    """verl validates every test_freq steps (`timing_s/testing`, EasyR1 `timing/validation`)
    and saves every save_freq (`timing_s/save_checkpoint`): that step is minutes longer by
    design. It is no regression, nor is its validation the slow phase; a step whose
    training phases grew beside a save still is."""
    steps = run([0.3] * 12)
    at = steps[-1].at
    for i, extra in ((13, {"timing_s/testing": 240.0}),
                     (14, {"timing/validation": 120.0, "timing_s/save_checkpoint": 900.0})):
        took = GEN_S + 0.3 + sum(extra.values())
        at += timedelta(seconds=took)
        steps.append(StepTiming(i, at, took,
                                {"timing_s/gen": GEN_S, "timing_s/reward": 0.3, **extra}))
        assert step_time_regression(snapshot(steps), TH, at + timedelta(seconds=0.1)) is None
    at += timedelta(seconds=0.5)
    steps.append(StepTiming(15, at, 60.5, {"timing_s/gen": GEN_S, "timing_s/reward": 30.3,
                                            "timing_s/save_checkpoint": 30.0}))
    found = step_time_regression(snapshot(steps), TH.__class__(**{**TH.__dict__,
                                                                  "slow_for_s": 0}), at)
    assert found is not None and found.details["phase"] == "timing_s/reward"


def test_a_step_in_progress_busy_validating_is_no_regression_and_is_sampled_in_time() -> None:
    """A step of minutes that overran by validating (its trainer's stacks busy in
    _validate) opens no step_time_regression while it runs; busy elsewhere, it does. Its
    stacks are sampled once it overran its slow limit, before the regression's hold ends,
    not only at the hang limit (5x)."""
    steps = [StepTiming(i, T0 + timedelta(seconds=180 * i), 180.0, {"timing_s/gen": 100.0})
             for i in range(1, 11)]
    th = TH.__class__(**{**TH.__dict__, "slow_for_s": 30})
    quiet = TrialSnapshot(trial_id="r", experiment="verl", status="RUNNING",
                          process_alive=True, process_gone_since=None,
                          last_result_at=steps[-1].at, steps=steps)
    overran = steps[-1].at + timedelta(seconds=slow_limit(180.0, th))
    assert not needs_verdict(quiet, th, overran - timedelta(seconds=1))
    assert needs_verdict(quiet, th, overran + timedelta(seconds=1))  # 540 s, not 900 s
    later = overran + timedelta(seconds=th.slow_for_s + 60)
    busy = replace(quiet, hung=False, verdict="slow, busy in generate", verdict_at=overran)
    found = step_time_regression(busy, th, later)
    assert found is not None and found.details["in_progress"]
    validating = replace(busy, during="validation")
    assert step_time_regression(validating, th, later) is None
    assert trial_stalled(validating, th, later) is None  # busy: no stall either
    # While its stacks are being taken, the step that overran opens nothing yet: hung (a
    # stall, one incident) or busy (this regression) is for them to say.
    sampling = replace(quiet, verdict_pending=True)
    assert step_time_regression(sampling, th, later) is None
    assert step_time_regression(quiet, th, later) is not None  # no agent to ask: as before

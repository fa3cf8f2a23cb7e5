"""The trial detectors as pure rules: thresholds, phases named, paused/stopped trials left alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from dashboard.incidents.trial_rules import (
    StepTiming,
    Thresholds,
    TrialSnapshot,
    derive_status,
    evaluate_trial,
    needs_verdict,
    next_check,
    phase_timings,
    step_time_regression,
    trial_errored,
    trial_process_gone,
    trial_stalled,
)

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
TH = Thresholds(stall_min_s=120, stall_factor=5, slow_factor=3, slow_min_excess_s=1,
                slow_for_s=0, slow_window=20, gone_grace_s=30, errored_recent_s=86400,
                hang_factor=5, hang_min_s=30)


def steps(n: int, every_s: float = 10, phases: dict[str, float] | None = None) -> list[StepTiming]:
    return [StepTiming(i + 1, T0 + timedelta(seconds=every_s * i), every_s, dict(phases or {}))
            for i in range(n)]


def trial(**kw) -> TrialSnapshot:  # type: ignore[no-untyped-def]
    base = {"trial_id": "abcde_00001", "experiment": "exp", "status": "RUNNING",
            "process_alive": True, "process_gone_since": None, "last_result_at": T0,
            "steps": steps(10)}
    base.update(kw)
    return TrialSnapshot(**base)


def test_stall_uses_the_larger_of_minimum_and_factor_times_median() -> None:
    history = steps(10, every_s=60)  # median interval 60 s -> limit max(120, 300) = 300 s
    last = history[-1].at
    quiet = trial(steps=history, last_result_at=last)
    assert trial_stalled(quiet, TH, last + timedelta(seconds=299)) is None
    found = trial_stalled(quiet, TH, last + timedelta(seconds=301))
    assert found and found.kind == "trial_stalled" and found.details["limit_s"] == 300
    fast = trial(steps=steps(10, every_s=1), last_result_at=T0)
    assert trial_stalled(fast, TH, T0 + timedelta(seconds=119)) is None
    assert trial_stalled(fast, TH, T0 + timedelta(seconds=121)) is not None


def test_a_hung_verdict_stalls_a_trial_before_the_stall_threshold() -> None:
    """Steps every 1 s: past max(30 s, 5 x 1 s) its stacks are sampled (needs_verdict, and
    next_check wakes the detector then); a hung verdict stalls it then, a busy one waits
    for the 120 s threshold."""
    quick = steps(10, every_s=1)
    last = quick[-1].at
    quiet = trial(steps=quick, last_result_at=last)
    assert next_check(quiet, [], TH, last + timedelta(seconds=20)) == last + timedelta(seconds=30)
    assert not needs_verdict(quiet, TH, last + timedelta(seconds=29))
    assert needs_verdict(quiet, TH, last + timedelta(seconds=31))
    at = last + timedelta(seconds=40)
    words = "hung in trainable (search.py:60), waiting on a sleep or a native call"
    hung = trial_stalled(replace(quiet, hung=True, verdict=words), TH, at)
    assert hung and hung.summary.endswith(f": {words}") and hung.details["limit_s"] == 30
    assert not needs_verdict(replace(quiet, hung=True), TH, at)  # judged once a silence
    assert trial_stalled(replace(quiet, hung=False, verdict="slow, busy in x"), TH, at) is None


def test_before_a_habit_the_first_step_is_judged_from_its_stacks() -> None:
    """Two steps (a validation line, one step) are no habit: its stacks are sampled at
    hang_min_s of silence all the same; hung stalls it then, busy holds it however long
    (a long first rollout), sampled again while the silence lasts; none (no agent could
    sample it) leaves the 120 s backstop."""
    young = trial(steps=steps(2, every_s=1), last_result_at=T0)
    assert next_check(young, [], TH, T0 + timedelta(seconds=5)) == T0 + timedelta(seconds=30)
    assert not needs_verdict(young, TH, T0 + timedelta(seconds=29))
    assert needs_verdict(young, TH, T0 + timedelta(seconds=31))
    at = T0 + timedelta(seconds=40)
    hung = trial_stalled(replace(young, hung=True, verdict="hung in compute_score"), TH, at)
    assert hung and hung.details["limit_s"] == 30 and "compute_score" in hung.summary
    busy = replace(young, hung=False, verdict="slow, busy in generate",
                   verdict_at=T0 + timedelta(seconds=35))
    late = T0 + timedelta(seconds=600)
    assert trial_stalled(busy, TH, late) is None
    assert not needs_verdict(busy, TH, T0 + timedelta(seconds=90))
    assert needs_verdict(busy, TH, T0 + timedelta(seconds=96))  # looked at again
    assert next_check(busy, [], TH, T0 + timedelta(seconds=40)) == T0 + timedelta(seconds=95)
    assert trial_stalled(young, TH, T0 + timedelta(seconds=119)) is None
    assert trial_stalled(young, TH, T0 + timedelta(seconds=121)) is not None  # backstop
    # A run whose trainer runs no call (its loop returned; the actor lives on, idle).
    idle = replace(young, hung=True, in_run_call=False)
    assert not needs_verdict(idle, TH, T0 + timedelta(seconds=31))
    assert trial_stalled(idle, TH, late) is None
    # A run found from Ray that has printed nothing yet: silent since it was found.
    found = trial(steps=[], last_result_at=None, started_at=T0)
    assert needs_verdict(found, TH, T0 + timedelta(seconds=31))
    assert trial_stalled(replace(found, hung=True), TH, at) is not None
    assert trial_stalled(trial(steps=[], last_result_at=None), TH, late) is None


def test_stall_says_busy_or_idle() -> None:
    late = T0 + timedelta(seconds=500)
    idle = trial_stalled(trial(cpu_percent=0.0, gpu_percent=0.0), TH, late)
    busy = trial_stalled(trial(cpu_percent=99.0), TH, late)
    assert idle and "idle" in idle.summary
    assert busy and "busy" in busy.summary


def test_no_stall_when_process_dead_paused_or_unknown() -> None:
    late = T0 + timedelta(hours=1)
    assert trial_stalled(trial(process_alive=False), TH, late) is None
    assert trial_stalled(trial(process_alive=None), TH, late) is None
    assert trial_stalled(trial(status="PAUSED"), TH, late) is None  # PBT paused it
    assert trial_stalled(trial(status="TERMINATED"), TH, late) is None  # ASHA stopped it


def test_process_gone_after_grace_only_for_unfinished_trials() -> None:
    gone = trial(process_alive=False, process_gone_since=T0, pid=4242, node_ip="10.0.0.7")
    assert trial_process_gone(gone, TH, T0 + timedelta(seconds=29)) is None
    found = trial_process_gone(gone, TH, T0 + timedelta(seconds=31))
    assert found and "4242" in found.summary and "10.0.0.7" in found.summary
    for status in ("TERMINATED", "ERROR", "PAUSED"):
        stopped = trial(status=status, process_alive=False, process_gone_since=T0)
        assert trial_process_gone(stopped, TH, T0 + timedelta(hours=1)) is None
    # Ray says how it died: said.
    crashed = trial_process_gone(replace(gone, death="its node died (Ray: NODE_DIED)"), TH,
                                 T0 + timedelta(seconds=31))
    assert crashed and crashed.summary.endswith("has been gone for 31 s: its node died "
                                                "(Ray: NODE_DIED)"), crashed.summary
    # Ray says its owner ended it (Tune pausing it; Tune's own word lags): no alarm.
    paused = replace(gone, ended_on_purpose="OUT_OF_SCOPE: all references were removed")
    assert trial_process_gone(paused, TH, T0 + timedelta(hours=1)) is None


def test_errored_quotes_the_error() -> None:
    text = "Failure # 1\nTraceback (most recent call last):\n  ...\nValueError: reward exploded"
    found = trial_errored(trial(status="ERROR", error_text=text), TH, T0)
    assert found and "ValueError: reward exploded" in found.summary
    assert trial_errored(trial(status="RUNNING", error_text=""), TH, T0) is None


def test_an_old_failure_opens_nothing_but_an_open_one_stays_open() -> None:
    text = "Failure # 1\nValueError: reward exploded"
    old, fresh = T0 - timedelta(days=3), T0 - timedelta(minutes=5)
    assert trial_errored(trial(status="ERROR", error_text=text, error_at=old), TH, T0) is None
    assert trial_errored(trial(status="ERROR", error_text=text, error_at=fresh), TH, T0)
    assert trial_errored(trial(status="ERROR", error_text=text, error_at=old,
                               errored_firing=True), TH, T0)


def test_a_trial_gone_long_ago_opens_nothing_but_an_open_one_stays_open() -> None:
    # A node's Ray temp dir keeps old sessions whose Tune state still says RUNNING.
    now = T0 + timedelta(days=3)
    old = trial(process_alive=False, process_gone_since=T0, last_result_at=T0)
    assert trial_process_gone(old, TH, now) is None
    assert trial_process_gone(replace(old, gone_firing=True), TH, now)
    recent = replace(old, last_result_at=now - timedelta(minutes=10))
    assert trial_process_gone(recent, TH, now)


def test_regression_names_the_phase_that_blew_up() -> None:
    normal = {"timing_s/gen": 2.0, "timing_s/reward": 1.0}
    history = steps(10, phases=normal)
    slow = StepTiming(11, T0 + timedelta(seconds=400), 390.0,
                      {"timing_s/gen": 2.1, "timing_s/reward": 380.0})
    found = step_time_regression(trial(steps=[*history, slow]), TH, slow.at)
    assert found and found.details["phase"] == "timing_s/reward"
    assert "timing_s/reward" in found.summary and found.details["factor"] > 300


def test_regression_ignores_small_absolute_blips_and_short_history() -> None:
    tiny = [StepTiming(i, T0 + timedelta(seconds=i), 0.01, {"timing_s/x": 0.01}) for i in range(10)]
    blip = StepTiming(11, T0 + timedelta(seconds=11), 0.5, {"timing_s/x": 0.5})  # 50x, 0.5 s
    assert step_time_regression(trial(steps=[*tiny, blip], last_result_at=blip.at), TH,
                                blip.at) is None
    short = steps(2)
    assert step_time_regression(trial(steps=short, last_result_at=short[-1].at), TH,
                                short[-1].at + timedelta(seconds=1)) is None


def test_regression_for_the_step_in_progress() -> None:
    history = steps(10, every_s=10)
    last = history[-1].at
    running = trial(steps=history, last_result_at=last)
    assert step_time_regression(running, TH, last + timedelta(seconds=29)) is None
    found = step_time_regression(running, TH, last + timedelta(seconds=31))
    assert found and found.details["in_progress"] is True


def test_healthy_trial_raises_nothing() -> None:
    healthy = trial(steps=steps(20, phases={"timing_s/gen": 5.0}), last_result_at=T0)
    assert evaluate_trial(healthy, TH, T0 + timedelta(seconds=5)) == []


def test_phase_timings_match_the_configured_patterns() -> None:
    metrics = {"timing_s/gen": 1.5, "timing/reward": 2, "time/update": 0.5, "gen_time_s": 3.0,
               "loss": 0.1, "timing_s/bad": None, "timing_s/flag": True}
    found = phase_timings(metrics, ["timing_s/*", "timing/*", "time/*", "*_time_s"])
    assert found == {"timing_s/gen": 1.5, "timing/reward": 2.0, "time/update": 0.5,
                     "gen_time_s": 3.0}
    # A step's whole time and statistics over workers are no phase of it: a slow step is
    # never blamed on "phase timing_s/step".
    rl = {"timing_s/gen": 4.0, "timing_s/step": 9.0, "train/timing/step_total": 9.0,
          "train/timing/generation": 5.0, "timing_s/generation_timing/max": 4.1}
    assert phase_timings(rl, ["timing_s/*", "train/timing/*"]) == {
        "timing_s/gen": 4.0, "train/timing/generation": 5.0}
    # verl's agent loop: statistics over the samples of `gen`, some of them token counts.
    agent = {"timing_s/gen": 40.0, "timing_s/agent_loop/slowest/generate_sequences": 38.0,
             "timing_s/agent_loop/slowest/prompt_length": 512,
             "timing_s/agent_loop/slowest/response_length": 8192,
             "timing_s/agent_loop/slowest/num_preempted": -1,
             "timing_s/agent_loop/tool_calls/mean": 3.0}
    assert phase_timings(agent, ["timing_s/*"]) == {"timing_s/gen": 40.0}


def test_status_trusts_error_file_and_live_actor_over_tune_state() -> None:
    assert derive_status("RUNNING", True, True)[0] == "ERROR"
    assert derive_status("PENDING", False, True)[0] == "RUNNING"  # Tune's file lags
    assert derive_status("TERMINATED", False, True)[0] == "TERMINATED"  # reused actor
    assert derive_status("PAUSED", False, False)[0] == "PAUSED"
    assert derive_status("", False, None)[0] == "UNKNOWN"

"""RL post-training runs are trials like Tune's (issue 26), for raywatch's own reader and
for a real node agent reporting over HTTP alike: verl's and EasyR1's file loggers and
OpenRLHF's TensorBoard runs, each file written as its framework writes it, are found and
tailed as runs with their steps and per-phase timings, named by framework in the trials
API and on the experiments page; another program's JSONL is no run; a restart that
truncates a run's log starts a new attempt and loses nothing stored; a run's file over
its cap or linked out of its root is that run's problem."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from playwright.sync_api import expect

from dashboard.trials.models import StepResult, Trial
from dashboard.trials.tasks import poll_trial_logs
from tests.conftest import LiveServer, login, token_client
from tests.rl_loggers import (
    EasyR1FileLogger,
    OpenRLHFTensorboardLogger,
    VerlFileLogger,
    easyr1_config,
    easyr1_step,
    openrlhf_step,
    verl_step,
)
from tests.test_trial_files_stay_in_roots import SECRET, reader  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.both_backends]
VERL = ("gsm8k", "qwen-ppo")
EASYR1 = ("easy_r1", "qwen-grpo")
OPENRLHF = ("tb_openrlhf", "ppo_0813T19:25")
TENSORBOARD = ("tb_other", "run1")


def shown(api) -> dict[tuple[str, str], dict]:  # type: ignore[no-untyped-def]
    """Every trial the trials API lists, by (experiment, trial id)."""
    reply = api.get("/api/trials/?page_size=100")
    return {(t["experiment"], t["trial_id"]): t for t in reply.json()} \
        if reply.status_code == 200 else {}


def steps(key: tuple[str, str]) -> list[tuple[int, int]]:
    """A run's stored steps, (attempt, iteration): what its charts draw."""
    return list(StepResult.objects.filter(trial__experiment__name=key[0], trial__trial_id=key[1])
                .order_by("attempt", "iteration").values_list("attempt", "iteration"))


def metrics(api, trial: dict, iteration: int) -> dict:  # type: ignore[no-untyped-def]
    results = api.get(f"/api/trials/{trial['id']}/results/").json()
    return next(r["metrics"] for r in results if r["iteration"] == iteration
                and r["attempt"] == trial["attempt"])


def write_runs(root: Path) -> None:
    """Three steps of a run of each framework, and JSONL files of other programs."""
    verl = VerlFileLogger(root / "verl_logs", *VERL)  # VERL_FILE_LOGGER_ROOT
    easy = EasyR1FileLogger(easyr1_config(root / "checkpoints", *EASYR1))
    easy.log({"val/reward_score": 0.2}, 0)  # val_before_train
    openrlhf = OpenRLHFTensorboardLogger(root / OPENRLHF[0], OPENRLHF[1])
    other = OpenRLHFTensorboardLogger(root / TENSORBOARD[0], TENSORBOARD[1])
    for step in (1, 2, 3):
        verl.log(verl_step(step), step)
        easy.log(easyr1_step(step), step)
        openrlhf.log_train(step, openrlhf_step(step))
        other.log_train(step, {"loss": 1.0 / step})
    verl.finish()
    openrlhf.close()
    other.close()
    data = root / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"prompt": "1+1=?", "answer": "2"}\n' * 50)
    (data / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2, 3)))


def test_each_frameworks_runs_are_trials_with_steps_phases_and_framework(
        reader, admin: User, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    root = tmp_path / "runs"
    write_runs(root)
    api = token_client(admin)
    running = reader(root)
    running.until(lambda: all(shown(api).get(k, {}).get("iteration") == 3
                              for k in (VERL, EASYR1, OPENRLHF, TENSORBOARD)), "four runs")

    trials = shown(api)
    assert set(trials) == {VERL, EASYR1, OPENRLHF, TENSORBOARD}  # no dataset, no other log
    assert {k: t["framework"] for k, t in trials.items()} == {
        VERL: "verl", EASYR1: "easyr1", OPENRLHF: "openrlhf", TENSORBOARD: "tensorboard"}
    assert steps(VERL) == [(1, 1), (1, 2), (1, 3)]
    assert steps(EASYR1) == [(1, 0), (1, 1), (1, 2), (1, 3)]  # the validation line too
    # Per-phase timings are metrics, by the same names whether nested or flat.
    verl_metrics, easy_metrics = metrics(api, trials[VERL], 3), metrics(api, trials[EASYR1], 3)
    assert verl_metrics["timing_s/reward"] == 0.5 and easy_metrics["timing_s/reward"] == 0.01
    assert easy_metrics["actor/kl_loss"] == pytest.approx(0.003)
    assert metrics(api, trials[OPENRLHF], 3)["train/timing/make_experience"] == 1.0
    # A step's whole time is its step time (the step-time detector's and the phase chart's).
    assert [trials[k]["last_step_s"] for k in (VERL, EASYR1, OPENRLHF)] == [4.8, 6.9, 6.5]
    assert trials[EASYR1]["config"]["trainer"]["project_name"] == "easy_r1"

    client = Client()
    client.force_login(admin)
    page = client.get("/experiments/").content.decode()
    initial = json.loads(re.search(r'id="experiments-initial"[^>]*>(.*?)</script>', page,
                                   re.S)[1])
    assert {e["name"]: e["frameworks"] for e in initial["experiments"]} == {
        "gsm8k": ["verl"], "easy_r1": ["easyr1"], "tb_openrlhf": ["openrlhf"],
        "tb_other": ["tensorboard"]}


def test_a_restart_that_truncates_a_runs_log_is_a_new_attempt(
        reader, admin: User, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    root = tmp_path / "runs"
    verl = VerlFileLogger(root, *VERL)
    config = easyr1_config(root / "checkpoints", *EASYR1)
    easy = EasyR1FileLogger(config)
    for step in (1, 2, 3, 4):
        verl.log(verl_step(step), step)
        easy.log(easyr1_step(step), step)
    api = token_client(admin)
    running = reader(root)
    running.until(lambda: steps(VERL)[-1:] == steps(EASYR1)[-1:] == [(1, 4)], "4 steps each")

    # Both resume from their step-2 checkpoint: each logger truncates its file at start.
    verl.finish()
    verl = VerlFileLogger(root, *VERL)
    easy = EasyR1FileLogger(config)
    for step in (3, 4, 5):
        verl.log(verl_step(step), step)
        easy.log(easyr1_step(step), step)
    running.until(lambda: steps(VERL)[-1:] == steps(EASYR1)[-1:] == [(2, 5)], "the restarts")

    before, after = [(1, i) for i in (1, 2, 3, 4)], [(2, i) for i in (3, 4, 5)]
    assert steps(VERL) == steps(EASYR1) == before + after  # nothing stored is lost
    trials = shown(api)
    assert [(trials[k]["attempt"], trials[k]["iteration"]) for k in (VERL, EASYR1)] == [
        (2, 5), (2, 5)]
    results = api.get(f"/api/trials/{trials[VERL]['id']}/results/").json()
    assert sorted({r["attempt"] for r in results}) == [1, 2]  # the chart's two lines


def test_a_runs_file_over_its_cap_or_linked_out_of_its_root_is_its_problem(
        reader, admin: User, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    root = tmp_path / "runs"
    big = VerlFileLogger(root, "gsm8k", "big")
    for step in range(1, 6001):  # ~1.5 MB
        big.log(verl_step(step), step)
    small = VerlFileLogger(root, "gsm8k", "small")
    small.log(verl_step(1), 1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "experiment_log.jsonl").write_text(json.dumps(
        {"step": 1, "timing_s": {"gen": 1.0}, SECRET: {"x": 1.0}}) + "\n")
    linked = root / "checkpoints" / "easy_r1" / "linked"
    linked.mkdir(parents=True)
    (linked / "experiment_log.jsonl").symlink_to(outside / "experiment_log.jsonl")
    api = token_client(admin)
    running = reader(root, LOG_FILE_MAX_MB=1)

    def problem(key: tuple[str, str]) -> str:
        trial = shown(api).get(key)
        return trial["last_parse_error"] if trial and trial["parse_errors"] else ""

    big_run, linked_run = ("gsm8k", "big"), ("easy_r1", "linked")
    running.until(lambda: steps(("gsm8k", "small")) == [(1, 1)] and problem(big_run)
                  and problem(linked_run), "the runs and their problems")
    assert "big.jsonl" in problem(big_run) and "cap" in problem(big_run)
    assert "experiment_log.jsonl" in problem(linked_run)
    assert "symbolic link" in problem(linked_run)
    assert steps(big_run) == steps(linked_run) == []
    assert shown(api)[linked_run]["framework"] == "easyr1"
    assert SECRET not in api.get("/api/trials/?page_size=100").content.decode()
    assert not Trial.objects.filter(trial_id__contains=SECRET).exists()


@pytest.mark.browser
def test_the_experiments_page_names_frameworks_and_a_run_shows_its_last_phases(
        page, live_server_asgi: LiveServer, viewer: User, settings,  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    root = tmp_path / "runs"
    write_runs(root)
    settings.CENTRAL_LOGS, settings.LOG_DIRS = True, [str(root)]
    poll_trial_logs()
    run = Trial.objects.get(experiment__name=VERL[0], trial_id=VERL[1])

    login(page, live_server_asgi, viewer, "/experiments/")
    expect(page.locator('#experiments tr[data-experiment="gsm8k"] td.framework')).to_have_text(
        "verl")
    expect(page.locator('#experiments tr[data-experiment="tb_openrlhf"] td.framework')
           ).to_have_text("openrlhf")
    page.goto(f"{live_server_asgi.url}/trials/{run.pk}/")
    expect(page.locator('[data-fact="framework"]')).to_have_text("· verl")
    reward = page.locator('#last-phases tr[data-phase="timing_s/reward"] td')
    expect(reward).to_have_count(3)  # its last steps
    expect(reward.first).to_have_text("0.5")
    names = page.evaluate("document.getElementById('phases-chart').data.map(t => t.name)")
    assert "timing_s/gen" in names and "timing_s/step" not in names  # the total: not stacked

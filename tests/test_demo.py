"""`make demo` as a person runs it: `python -m demo` (what the target runs) from the
repository, in a session of its own like a terminal's. Within 120 s of its page
answering, the Alerts page shows the six things the demo's search gets wrong; no healthy
trial raises an alarm while ASHA stops some early; the hung trial is terminated from its
trial page and the orphaned process killed from its GPU's page, both audited as
succeeded. Ctrl-C then stops everything the demo started (its Ray cluster, the search's
driver, the orphan, raywatch) and nothing else: the test suite's own Ray cluster runs on.

RAYWATCH_SHOTS=DIR saves screenshots of the Alerts page, a trial page and the GPU wall
at 1280 and 1440 px.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from collectors.localray import LocalCluster, free_port
from demo.__main__ import TRAIN_RUN
from demo.screenshots import EXPERIMENT, KINDS, WIDTH, capture, rl_run, train_stall
from demo.screenshots import answering as page_answers
from demo.workload import MAX_STEPS
from tests.conftest import browser_context, wait_for
from tests.patience import ms, patient
from tests.served import NOT_INHERITED, ROOT
from tests.test_end_to_end import screenshots

pytestmark = [pytest.mark.beside, pytest.mark.ray, pytest.mark.browser, pytest.mark.timeout(900)]
PROMISED_S = 120  # README: what you see within two minutes of the page answering
FAULTY = ("hang", "slow", "error")


@dataclass
class Demo:
    process: subprocess.Popen[bytes]
    url: str
    data: Path
    log: Path
    answered_at: float = 0.0

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def password(self) -> str:
        return (self.data / "admin-password.txt").read_text().split()[1]


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    port, data, log = free_port(), tmp_path / "demo", tmp_path / "demo.log"
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "demo"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**env, "RAYWATCH_DEMO_DIR": str(data), "PORT": str(port)},
            start_new_session=True)
    running = Demo(process, f"http://127.0.0.1:{port}", data, log)
    try:
        yield running
    finally:
        if process.poll() is None:  # the test failed before its Ctrl-C
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(patient(120))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        print(running.output()[-6000:])


def answering(demo: Demo) -> bool:
    assert demo.process.poll() is None, f"the demo ended:\n{demo.output()[-4000:]}"
    return page_answers(demo.url)


def api(page, path: str) -> Any:  # type: ignore[no-untyped-def]
    """The API as the logged-in page's session sees it (paths from the context's
    base_url); a list, paged or not."""
    reply = page.request.get(path)
    assert reply.ok, f"{path}: {reply.status} {reply.text()[:300]}"
    body = reply.json()
    return body["results"] if isinstance(body, dict) and "results" in body else body


def family(pid: int) -> dict[int, tuple[float, str]]:
    """`pid` and every process below it: pid -> (start time, command line)."""
    root = psutil.Process(pid)
    found = {}
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            found[process.pid] = (process.create_time(), " ".join(process.cmdline()))
    return found


def alive(pid: int, started: float) -> bool:
    try:
        process = psutil.Process(pid)
        return process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def suite_cluster(cluster: LocalCluster) -> dict[int, float]:
    """The processes of the test suite's own Ray cluster: its GCS and raylet."""
    found = {p.pid: p.create_time() for p in psutil.process_iter(["cmdline"])
             if cluster.session_dir in " ".join(p.info["cmdline"] or [])}
    assert found, f"no process of the suite's cluster ({cluster.session_dir}) found"
    return found


def login(page, demo: Demo) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{demo.url}/login/?next=/alerts/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", demo.password())
    page.click("button[type=submit]")
    page.wait_for_url(f"{demo.url}/alerts/")


def shown_kinds(page) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    """Each kind with a firing incident whose row the Alerts page shows: kind -> incident.
    A trial's incident is the search's, but for the GRPO run's overdue call (the run is a
    trial too, and its hung call its incident)."""
    shown: dict[str, dict] = {}
    for incident in api(page, "/api/alerts/?state=firing&page_size=200"):
        row = page.locator(f'#alerts tr[data-incident="{incident["id"]}"]')
        if incident["trial_id"] and incident["experiment"] != EXPERIMENT \
                and incident["kind"] != "call_overdue":
            continue
        if incident["kind"] in KINDS and row.count() and row.is_visible():
            shown.setdefault(incident["kind"], incident)
    return shown


def trials_by_role(page) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    """The search's trials: hang, slow, error, and the healthy ones by trial id."""
    roles: dict[str, dict] = {}
    for trial in api(page, "/api/trials/?experiment=raywatch-demo&page_size=100"):
        config = trial["config"]
        role = ("hang" if config["prompts"] != "all" else "slow" if config["judge"] == "api"
                else "error" if config["lr"] > 1 else trial["trial_id"])
        roles[role] = trial
    return roles


def expected(incident: dict, trials: dict[str, dict], orphan_pid: int, verl_pk: int) -> bool:
    """One of the demo's seven failures, on the trial, process or call that has it."""
    kinds_of = {"hang": ("trial_stalled", "gpu_idle_during_step"),
                "slow": ("step_time_regression", "gpu_idle_during_step"),
                "error": ("trial_errored",)}
    kind = incident["kind"]
    if kind == "demand_infeasible":
        return "Evaluator" in incident["summary"]
    if kind == "gpu_orphan_memory":
        return incident["details"]["pid"] == orphan_pid
    if kind == "call_overdue":  # the EasyR1 run's reward call, and nothing else of it
        return incident["details"]["call"] == "AutoRewardManager.compute_reward"
    if kind == "trial_stalled" and incident["trial_pk"] == verl_pk:  # verl's first step
        return True
    if kind == "trial_stalled" and incident["trial_id"] == TRAIN_RUN:  # its rank 1's loader
        return True
    return any(incident["trial_id"] == trials[role]["trial_id"] and kind in kinds
               for role, kinds in kinds_of.items())


def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    if where := os.environ.get("RAYWATCH_SHOTS"):
        page.wait_for_timeout(2000)  # live data and charts settle
        screenshots(page, str(Path(where) / f"demo-{name}"))


def act(page, button: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    """Click an action's button, give the reason, confirm, and see it succeed."""
    page.click(button)
    dialog = page.locator("#action-dialog")
    expect(dialog).to_be_visible(timeout=ms(20))
    page.fill("#action-reason", reason)
    page.click("#action-confirm")
    expect(page.locator("#action-state")).to_have_text("succeeded", timeout=ms(90))


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_make_demo_shows_every_failure_acts_on_two_and_stops_clean(  # type: ignore[no-untyped-def]
    demo: Demo, ray_cluster: LocalCluster, browser, tmp_path: Path
) -> None:
    bystanders = suite_cluster(ray_cluster)
    wait_for(lambda: answering(demo), 300, 0.5, "the demo's page to answer",
             explain=lambda: demo.output()[-3000:])
    demo.answered_at = time.monotonic()
    assert "created admin login: user 'admin'" in demo.output()

    context = browser_context(browser, base_url=demo.url, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        login(page, demo)
        seen_at: dict[str, float] = {}

        def all_kinds() -> dict[str, dict] | None:
            page.reload()
            try:
                page.wait_for_selector("#alerts tr[data-incident]", timeout=5_000)
            except PlaywrightTimeout:
                return None  # nothing firing yet
            shown = shown_kinds(page)
            for kind in shown:
                seen_at.setdefault(kind, round(time.monotonic() - demo.answered_at))
            return shown if len(shown) == len(KINDS) else None

        shown = wait_for(all_kinds, PROMISED_S - (time.monotonic() - demo.answered_at), 3,
                         f"all of {KINDS} on the Alerts page",
                         explain=lambda: (seen_at, api(page, "/api/alerts/")))
        print(f"seconds after the page answered: {seen_at}")
        shoot(page, "alerts")
        page.goto("/gpus/")
        shoot(page, "gpus")

        trials = trials_by_role(page)
        assert shown["trial_stalled"]["trial_id"] == trials["hang"]["trial_id"]
        assert shown["step_time_regression"]["trial_id"] == trials["slow"]["trial_id"]
        assert shown["trial_errored"]["trial_id"] == trials["error"]["trial_id"]
        assert "Evaluator" in shown["demand_infeasible"]["summary"]
        assert shown["call_overdue"]["details"]["call"] == "AutoRewardManager.compute_reward"
        # The hung call is the GRPO run's: the run's page says so, and lists the call
        # running now past its limit.
        run_pk = wait_for(lambda: api(page, f"/api/alerts/{shown['call_overdue']['id']}/"
                                      )["trial_pk"], 30, 2, "the hung call to be the run's")
        page.goto(f"/trials/{run_pk}/")
        expect(page.locator('[data-fact="health"]')).to_have_text("call overdue")
        reward = page.locator("#calls tr[data-call]",
                              has_text="AutoRewardManager.compute_reward")
        expect(reward.locator("td.running")).to_have_class("running bad", timeout=ms(10))
        expect(page.locator("#incidents")).to_contain_text("call_overdue")
        # verl as it ships, nothing configured: its reward, inside its TaskRunner, waits on
        # a judge that never answers in step 1. Found from Ray, its console read, it is
        # stalled, hung in that frame (its stacks, not a threshold), within the minute.
        verl = wait_for(lambda: rl_run(page, "verl"), 30, 2, "the verl run, found from Ray")
        stalled = wait_for(lambda: next((i for i in api(page, "/api/alerts/?kind=trial_stalled"
                                                     "&state=firing&page_size=200")
                                         if i["trial_pk"] == verl["id"]), None), 60, 2,
                           "the verl run's first-step hang")
        assert stalled["details"]["hung"] is True, stalled["details"]
        assert "hung in ask_the_judge (demo/grpo.py:" in stalled["details"]["verdict"], stalled
        assert verl["iteration"] in (None, 0)  # its step-0 validation line only
        orphan = shown["gpu_orphan_memory"]["details"]
        leftover = [p for p in psutil.Process(demo.process.pid).children(recursive=True)
                    if "demo.leftover" in " ".join(p.cmdline())]
        assert [p.pid for p in leftover] == [orphan["pid"]]
        # The home page's triage has it all, each line leading to where to act.
        page.goto("/")
        hung_row = page.locator(f'#trials-table tr[data-trial="{trials["hang"]["trial_id"]}"]')
        expect(hung_row).to_contain_text("stalled", timeout=ms(20))
        expect(hung_row.locator("td.act a").first).to_have_attribute(
            "href", f"/trials/{trials['hang']['id']}/")
        expect(page.locator(f'#trials-table tr[data-trial="{trials["slow"]["trial_id"]}"]')
               ).to_contain_text("slow")
        expect(page.locator("#demands-table")).to_contain_text("Evaluator")
        expect(page.locator("#gpus-table")).to_contain_text("orphan")
        expect(page.locator("#triage-simulated")).to_be_visible()
        shoot(page, "home")
        # `make screenshots` takes docs/pages.md's pictures of these pages, the same way.
        # The Ray Train run as Ray ships it: stalled, naming its rank 1 outside all_reduce.
        train_pk = wait_for(lambda: train_stall(page), PROMISED_S, 2,
                            "the Ray Train run's stall")
        [stall] = [i for i in api(page, "/api/alerts/?state=firing&page_size=200")
                   if i["kind"] == "trial_stalled" and i["trial_pk"] == train_pk]
        assert "rank 1 of 2 not in the collective" in stall["summary"], stall["summary"]
        pictures = capture(page, tmp_path / "readme", settle_ms=500)
        assert [p.stem for p in pictures] == ["home", "alerts", "experiment", "trial", "run",
                                              "stalled-run", "train-run", "call", "gpus",
                                              "jobs", "cluster"]
        assert {png_size(p)[0] for p in pictures} == {WIDTH}
        # The slow judge leaves its GPU idle through each long step: said, honestly.
        wait_for(lambda: trials["slow"]["trial_id"] in {i["trial_id"] for i in api(
            page, "/api/alerts/?kind=gpu_idle_during_step&page_size=200")}, 60, 2,
            "an idle GPU during a step of the slow trial")

        # Nothing else raises an alarm (no healthy trial, no job, no other process),
        # though ASHA stops some healthy trials early.
        def stopped_early() -> dict[str, dict] | None:
            now = trials_by_role(page)
            return now if any(t["status"] == "TERMINATED" and t["iteration"] < MAX_STEPS
                              for role, t in now.items() if role not in FAULTY) else None

        trials = wait_for(stopped_early, 120, 2, "a healthy trial ASHA stopped early")
        unexpected = [i for i in api(page, "/api/alerts/?page_size=500")
                      if not expected(i, trials, orphan["pid"], verl["id"])]
        assert not unexpected, [(i["kind"], i["trial_id"], i["summary"]) for i in unexpected]

        hang = trials["hang"]
        hung = psutil.Process(hang["pid"]).create_time()
        page.goto(f"/trials/{hang['id']}/")
        shoot(page, "trial")
        act(page, "#terminate-trial", "its prompt loader died; it waits for ever")
        assert not alive(hang["pid"], hung)

        page.goto(f"/gpus/{orphan['gpu']}/")
        forgotten = leftover[0].create_time()
        act(page, f'#processes tr[data-pid="{orphan["pid"]}"] [data-kill-process]',
            "forgotten by hand on GPU 3")
        assert not alive(orphan["pid"], forgotten)
        audit = {e["kind"]: e for e in api(page, "/api/audit/?page_size=50")}
        assert audit["terminate_trial"]["state"] == "succeeded", audit
        assert audit["terminate_trial"]["target"]["trial_id"] == hang["trial_id"]
        assert audit["kill_process"]["state"] == "succeeded", audit
        assert audit["kill_process"]["target"]["pid"] == orphan["pid"]
    finally:
        context.close()

    started = family(demo.process.pid)
    commands = " ".join(command for _, command in started.values())
    for part in ("manage.py serve", "demo/workload.py", "gcs_server", "raylet", "ray::"):
        assert part in commands, f"{part} is not among the demo's processes"
    os.killpg(demo.process.pid, signal.SIGINT)  # Ctrl-C in the demo's terminal
    assert demo.process.wait(patient(120)) == 0, demo.output()[-4000:]
    wait_for(lambda: not [p for p, (t, _) in started.items() if alive(p, t)], 30, 0.5,
             "every process the demo started to end",
             explain=lambda: [c[:100] for p, (t, c) in started.items() if alive(p, t)])
    assert all(alive(pid, t) for pid, t in bystanders.items()), "the suite's Ray cluster was hit"
    assert "demo: stopped" in demo.output()

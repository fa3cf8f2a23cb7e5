"""End to end, the documented way (docs/deploying.md, "Without compose"): `manage.py
migrate`, `ensure_admin` and `manage.py serve` in subprocesses, watching a real local
Ray cluster that runs a real Tune search with two hung trials. In Chromium and through
the API the admin sees the trials, the hang detected, acknowledges the alert, terminates
one hung trial from its trial page and the other (which ignores SIGTERM) from its
incident page; both processes are gone, the audit says so, and the GPU history chart has
points.

Once on the embedded default (its own SQLite file, in-memory channel layer, in-process
scheduler; no DATABASE_URL or REDIS_URL) and once on the production topology (Postgres,
Redis, and the Celery worker, notifier, beat and GPU agent that `serve` starts)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
from playwright.sync_api import expect

from collectors.localray import LocalCluster, free_port
from tests.conftest import browser_context, start_search, stop_node, wait_for
from tests.patience import ms
from tests.served import (
    QUICK,
    api_get,
    embedded_env,
    fake_gpu_spec,
    first_run,
    scratch_database,
    start_serve,
    stop_serve,
)

pytestmark = [pytest.mark.beside, pytest.mark.ray, pytest.mark.browser, pytest.mark.timeout(600)]
GPU = "GPU-e2e-0"
# Where to save screenshots of the embedded run, when a person wants to look at them.
SHOTS = os.environ.get("RAYWATCH_E2E_SHOTS")


@dataclass(frozen=True)
class Raywatch:
    backend: str
    url: str
    token: str
    password: str

    def api(self, path: str) -> Any:
        reply = api_get(f"{self.url}{path}", self.token)
        # A paginated list ({"results": [...]}) or a plain one.
        return reply["results"] if isinstance(reply, dict) and "results" in reply else reply


@pytest.fixture(params=["embedded", "production"])
def backend_env(request, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:  # type: ignore[no-untyped-def]
    env = embedded_env(tmp_path / "data")
    if request.param == "embedded":
        yield request.param, env
        return
    with scratch_database(os.environ["DATABASE_URL"]) as database_url:
        yield request.param, {**env, "DATABASE_URL": database_url,
                              "REDIS_URL": os.environ["REDIS_URL"],
                              "RAYWATCH_CHANNEL_PREFIX": f"e2e-{uuid.uuid4().hex[:6]}"}


@pytest.fixture
def tune_search(ray_cluster: LocalCluster, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real Tune search: one trial that hangs, one that hangs and ignores SIGTERM,
    two healthy ones. Started first: Tune takes a while to get going."""
    storage = tmp_path / "ray_results"
    storage.mkdir()
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    search = start_search(ray_cluster, storage, name, "terminate")
    yield name, storage
    stop_node(search)


@pytest.fixture
def raywatch(backend_env, tune_search, ray_cluster: LocalCluster,  # type: ignore[no-untyped-def]
             tmp_path: Path) -> Iterator[Raywatch]:
    """raywatch as docs/deploying.md starts it, pointed at the test cluster and the search's
    storage, with a fake NVML (no GPU here) that shows one GPU."""
    backend, env = backend_env
    env = {**env, **QUICK, "RAY_ADDRESS": ray_cluster.gcs_address,
           "RAYWATCH_LOG_DIRS": str(tune_search[1]), "RAYWATCH_GPU_SOURCE": "nvml",
           "RAYWATCH_NVML_MODULE": "tests.fake_pynvml",
           "FAKE_NVML_SPEC": fake_gpu_spec(tmp_path / "gpus.json", "e2e", 1)}
    token, password = first_run(env)
    port, log = free_port(), tmp_path / "serve.log"
    server = start_serve(env, port, log)
    try:
        yield Raywatch(backend, f"http://127.0.0.1:{port}", token, password)
    finally:
        output = stop_serve(server, log)
    print(output[-4000:])
    assert "Traceback" not in output, output[-8000:]


def trials_of(rw: Raywatch, name: str) -> dict[str, dict] | None:
    """The search's trials by behaviour, once raywatch has all four with their pids."""
    try:
        trials = rw.api(f"/api/trials/?experiment={name}")
    except OSError:
        return None
    if len(trials) < 4 or not all(t["pid"] for t in trials):
        return None
    return {t["config"]["behaviour"]: t for t in trials if t["config"]["behaviour"] != "healthy"}


def stalled(rw: Raywatch, name: str, trials: dict[str, dict]) -> dict[str, dict] | None:
    """The firing trial_stalled incident of each hung trial, once both are open."""
    incidents = rw.api(f"/api/alerts/?kind=trial_stalled&state=firing&experiment={name}")
    by_trial = {i["trial_id"]: i for i in incidents}
    found = {b: by_trial.get(t["trial_id"]) for b, t in trials.items()}
    return found if all(found.values()) else None


def login(page, rw: Raywatch, next_path: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{rw.url}/login/?next={next_path}")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", rw.password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{rw.url}{next_path}")


def shoot(page, rw: Raywatch, name: str) -> None:  # type: ignore[no-untyped-def]
    if SHOTS and rw.backend == "embedded":
        screenshots(page, f"{SHOTS}/e2e-{name}")


def screenshots(page, prefix: str) -> None:  # type: ignore[no-untyped-def]
    """The page at 1280 and 1440 px wide, full length: `prefix`-1280.png, -1440.png."""
    for width in (1280, 1440):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(800)  # Plotly's responsive relayout is debounced
        page.screenshot(path=f"{prefix}-{width}.png", full_page=True)
    page.set_viewport_size({"width": 1400, "height": 900})


def acknowledge(page, rw: Raywatch, incident: dict) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{rw.url}/alerts/")
    row = page.locator(f'#alerts tr[data-incident="{incident["id"]}"]')
    expect(row.locator("td.state")).to_have_text("firing", timeout=ms(20))
    row.locator("button.ack").click()
    expect(row.locator("td.state")).to_have_text("acknowledged", timeout=ms(20))
    expect(row).to_contain_text("acknowledged by admin")


def terminate(page, rw: Raywatch, path: str, trial: dict, reason: str, shot: str) -> None:  # type: ignore[no-untyped-def]
    """Click Terminate on `path`, check the dialog names the process, confirm, and
    watch the action succeed on the same page."""
    page.goto(f"{rw.url}{path}")
    page.click("#terminate-trial")
    dialog = page.locator("#action-dialog")
    expect(dialog).to_be_visible(timeout=ms(20))
    # The process as Ray ties it to the trial: its actor, from Ray's own listing.
    expect(dialog.locator('[data-fact="Process"]')).to_contain_text(
        f"pid {trial['pid']}: Ray worker of actor ")
    expect(dialog.locator('[data-fact="Trial"]')).to_contain_text(trial["trial_id"])
    page.fill("#action-reason", reason)
    page.click("#action-confirm")
    expect(dialog).to_be_hidden()
    expect(page.locator("#action-state")).to_have_text("succeeded", timeout=ms(60))
    shoot(page, rw, shot)


def gone(pid: int, started: float) -> bool:
    """Ended: no such process, another process on the pid, or a zombie its parent has
    not reaped yet (dead, as raywatch's terminate counts it)."""
    try:
        process = psutil.Process(pid)
        return process.create_time() != started or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def gpu_history(rw: Raywatch) -> list[datetime] | None:
    """The GPU chart's bucket times from the API, once there are several."""
    chart = rw.api(f"/api/gpus/{GPU}/samples/?since=-10m")
    times = [datetime.fromisoformat(t) for t in chart["series"]["t"]]
    return times if len(times) >= 3 else None


def test_a_hung_trial_is_found_acknowledged_and_terminated_from_the_browser(  # type: ignore[no-untyped-def]
    raywatch: Raywatch, tune_search, browser
) -> None:
    rw, name = raywatch, tune_search[0]
    trials = wait_for(lambda: trials_of(rw, name), 180, 1,
                      "the search's four trials in /api/trials/")
    hang, stubborn = trials["hang"], trials["stubborn"]
    started = {b: psutil.Process(t["pid"]).create_time() for b, t in trials.items()}
    incidents = wait_for(lambda: stalled(rw, name, trials), 120, 1,
                         "a trial_stalled incident for each hung trial",
                         explain=lambda: rw.api(f"/api/alerts/?experiment={name}"))

    context = browser_context(browser, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        login(page, rw, "/")
        # The home page's triage lists both hung trials, and each leads to its trial.
        for behaviour in ("hang", "stubborn"):
            row = page.locator(f'#trials-table tr[data-trial="{trials[behaviour]["trial_id"]}"]')
            expect(row).to_contain_text("stalled", timeout=ms(20))
            expect(row.locator("td.act a").first).to_have_attribute(
                "href", f"/trials/{trials[behaviour]['id']}/")
        shoot(page, rw, "home")
        acknowledge(page, rw, incidents["hang"])
        assert rw.api(f"/api/alerts/{incidents['hang']['id']}/")["acknowledged_by"] == "admin"

        terminate(page, rw, f"/trials/{hang['id']}/", hang, "hung in step 5", "trial")
        terminate(page, rw, f"/incidents/{incidents['stubborn']['id']}/", stubborn,
                  "hung in step 5, ignores SIGTERM", "incident")
        for behaviour, trial in trials.items():
            assert gone(trial["pid"], started[behaviour]), f"the {behaviour} trial still runs"

        audit = {e["target"]["trial_id"]: e
                 for e in rw.api("/api/audit/?kind=terminate_trial")}
        assert audit[hang["trial_id"]]["state"] == "succeeded"
        assert audit[hang["trial_id"]]["reason"] == "hung in step 5"
        assert audit[stubborn["trial_id"]]["state"] == "succeeded"
        assert {s["step"] for s in audit[stubborn["trial_id"]]["steps"]} >= {"forced", "gone"}
        assert {e["username"] for e in audit.values()} == {"admin"}

        times = wait_for(lambda: gpu_history(rw), 60, 1, "several points of GPU history")
        now = datetime.now(UTC)
        assert all(now - timedelta(minutes=15) < t <= now + timedelta(minutes=1) for t in times)
        assert len(set(times)) == len(times)
        page.goto(f"{rw.url}/gpus/{GPU}/")
        page.wait_for_function(
            "document.getElementById('util-chart').dataset.points > 1", timeout=ms(20))
        newest = page.evaluate("""(() => {
            const c = document.getElementById('util-chart');
            const x = c.data[c.data.length - 1].x;
            return x.map((v) => new Date(String(v).replace(' ', 'T')).getTime()); })()""")
        assert all(abs(ms / 1000 - now.timestamp()) < 900 for ms in newest), newest
        shoot(page, rw, "gpu")
    finally:
        context.close()

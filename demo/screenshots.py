"""`make screenshots`: the pictures of docs/pages.md (one is the README's), taken from
`make demo` by a script.

Starts the demo (python -m demo) on a free port with its data in a temporary directory,
waits until raywatch shows the demo's failures (at most --wait seconds), logs in with
Debian's Chromium driven by Playwright, saves each page of PAGES at 1440x900 into --out
(docs/screenshots/), then stops the demo as Ctrl-C does.

    python -m demo.screenshots [--out docs/screenshots] [--wait 180]

capture() is also what tests/test_demo.py calls on its own running demo, so the script's
pages are checked by the suite.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.localray import free_port

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
WIDTH, HEIGHT = 1440, 900
# The failures the demo's search (demo/workload.py) and GRPO runs (demo/grpo.py) have; the
# pictures wait for them, and for its Ray Train run's stall (demo/train.py).
KINDS = ("trial_stalled", "step_time_regression", "demand_infeasible", "gpu_idle_during_step",
         "gpu_orphan_memory", "trial_errored", "call_overdue")
EXPERIMENT = "raywatch-demo"


def api(page: Any, path: str) -> Any:
    """The API as the logged-in page's session sees it; a list, paged or not."""
    reply = page.request.get(path)
    if not reply.ok:
        raise RuntimeError(f"{path}: HTTP {reply.status} {reply.text()[:300]}")
    body = reply.json()
    return body["results"] if isinstance(body, dict) and "results" in body else body


def slow_trial(page: Any) -> dict[str, Any] | None:
    """The demo's trial whose reward phase grows (its judge is the hosted API): the page
    with the stacked per-phase step chart."""
    for trial in api(page, f"/api/trials/?experiment={EXPERIMENT}&page_size=100"):
        if trial["config"].get("judge") == "api":
            return trial
    return None


def rl_run(page: Any, framework: str = "easyr1") -> dict[str, Any] | None:
    """The demo's GRPO run of `framework` (demo/grpo.py), found from Ray, its console read."""
    return next((t for t in api(page, "/api/trials/?page_size=200")
                 if t.get("framework") == framework), None)


def train_stall(page: Any) -> int | None:
    """The demo's Ray Train run (demo/train.py) once its stall is alerted: its trial pk."""
    run = rl_run(page, "raytrain")
    if run is None:
        return None
    stalled = any(i["kind"] == "trial_stalled" and i["trial_pk"] == run["id"]
                  for i in api(page, "/api/alerts/?state=firing&page_size=200"))
    return run["id"] if stalled else None


def pages(page: Any) -> list[tuple[str, str, str]]:
    """(file name, path, selector that shows the page has its data) for each picture."""
    shots = [("home", "/", "#trials-table tr[data-trial]"),
             ("alerts", "/alerts/", "#alerts tr[data-incident]")]
    if trial := slow_trial(page):
        shots += [("experiment", f"/experiments/{trial['experiment_id']}/",
                   "tr[data-trial-id]"),
                  ("trial", f"/trials/{trial['id']}/", ".js-plotly-plot")]
    if run := rl_run(page):  # the EasyR1-shaped run, and the calls of its step
        shots.append(("run", f"/trials/{run['id']}/", "#calls tr[data-call]"))
    if run := rl_run(page, "verl"):  # verl as shipped, hung in its first step: its stacks
        shots.append(("stalled-run", f"/trials/{run['id']}/", "[data-stack-verdict]"))
    if run := train_stall(page):  # the Ray Train run: its ranks and which one holds it up
        shots.append(("train-run", f"/trials/{run}/", "[data-stack-verdict]"))
    if hung := next((i for i in api(page, "/api/alerts/?state=firing&page_size=200")
                     if i["kind"] == "call_overdue"), None):
        # The hung reward call: its stacks and the verdict they give.
        shots.append(("call", f"/incidents/{hung['id']}/", "[data-stack-verdict]"))
    shots.append(("gpus", "/gpus/", ".gpu-tile"))
    shots.append(("jobs", "/jobs/", "#calls tr[data-call]"))
    shots.append(("cluster", "/cluster/", "#sessions-table tr[data-session]"))
    return shots


def capture(page: Any, out: Path, settle_ms: int = 2500, width: int = WIDTH) -> list[Path]:
    """Each page of pages() at `width`xHEIGHT into `out`/NAME.png; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": width, "height": HEIGHT})
    written = []
    for name, path, ready in pages(page):
        page.goto(path)
        page.wait_for_selector(ready, timeout=30_000)
        page.wait_for_timeout(settle_ms)  # live data arrives and Plotly lays out
        target = out / f"{name}.png"
        page.screenshot(path=str(target))
        written.append(target)
    return written


def firing_kinds(page: Any) -> set[str]:
    return {i["kind"] for i in api(page, "/api/alerts/?state=firing&page_size=200")}


def wait(what: str, check: Callable[[], bool], seconds: float, demo: subprocess.Popen[bytes],
         log: Path) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if demo.poll() is not None:
            raise SystemExit(f"screenshots: the demo ended (exit {demo.returncode}):\n"
                             f"{log.read_text(errors='replace')[-3000:]}")
        if check():
            return True
        time.sleep(2)
    print(f"screenshots: {what} not within {seconds:.0f} s; taking the pictures anyway",
          file=sys.stderr)
    return False


def answering(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2):
            return True
    except (OSError, http.client.HTTPException):  # not up yet, or not HTTP (yet) there
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make screenshots", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--width", type=int, default=WIDTH,
                        help=f"the window's width in px (default {WIDTH}; 1280 to check a "
                             "narrower screen)")
    parser.add_argument("--wait", type=float, default=180,
                        help="seconds to wait for the demo's failures to show (default 180)")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"screenshots: no Chromium at {CHROMIUM} (Debian: apt-get install chromium)",
              file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="raywatch-shots-") as scratch:
        data, log = Path(scratch) / "demo", Path(scratch) / "demo.log"
        url = f"http://127.0.0.1:{(port := free_port())}"
        with log.open("ab") as sink:
            demo = subprocess.Popen([sys.executable, "-m", "demo"], cwd=ROOT, stdout=sink,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, "RAYWATCH_DEMO_DIR": str(data),
                                         "PORT": str(port)})
        print(f"screenshots: demo starting on {url} (its log: {log})")
        try:
            if not wait("the demo's page", lambda: answering(url), 300, demo, log):
                return 1
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                                     args=CHROMIUM_FLAGS)
                page = browser.new_page(base_url=url,
                                        viewport={"width": WIDTH, "height": HEIGHT})
                password = (data / "admin-password.txt").read_text().split()[1]
                page.goto("/login/?next=/")
                page.fill("input[name=username]", "admin")
                page.fill("input[name=password]", password)
                page.click("button[type=submit]")
                page.wait_for_url(f"{url}/")
                wait(f"all of {', '.join(KINDS)}",
                     lambda: set(KINDS) <= firing_kinds(page), args.wait, demo, log)
                wait("the Ray Train run's stall", lambda: train_stall(page) is not None, 120,
                     demo, log)
                written = capture(page, args.out, width=args.width)
                browser.close()
        finally:
            if demo.poll() is None:
                os.killpg(demo.pid, signal.SIGINT)  # the demo's own Ctrl-C path
                try:
                    demo.wait(120)
                except subprocess.TimeoutExpired:
                    os.killpg(demo.pid, signal.SIGKILL)
    print(json.dumps({"written": [str(p) for p in written]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

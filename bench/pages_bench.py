"""Pages at cluster size in Chromium (issue 16, goal 6): the trial table of a 10,000-trial
search, the alerts page with 5,000 open incidents, and the GPU wall with 4,096 GPUs
(512 nodes x 8), each first rendered and then kept live.

The load goes in through raywatch's own paths: trials as the store writes them (bulk,
one experiment, nine in ten RUNNING), the incidents through `sync_findings` (a stall of
each of 5,000 trials), and the GPUs as 512 agents' NVML polls (`ingest_gpu_poll`).

Two raywatch servers take turns on that database (`manage.py serve --no-celery`: the
production topology's web process on Postgres and Redis; no collectors, so nothing but
the bench changes the data): this checkout, and BASELINE_REV in a git worktree beside it
(by default the last commit before the trial table was paged on the server). For each
page, in a fresh Chromium context at 1440x900:

- first render: navigation start to the moment the page shows its rows (its first table
  row or tile, and the count beside it), the median of LOADS loads;
- live: for LIVE_S seconds a writer process changes 1,000 trials a second (new
  iteration and result time, pushed as raywatch's poll pushes them), re-polls 64 nodes'
  GPUs a second (512 tiles a second), and opens and resolves 20 incidents a second.
  Meanwhile the page's main thread is watched (long tasks over 50 ms: their sum and the
  longest), and one action is timed from input to the answer on screen: sorting the
  trial table by Best (the best trial on top), filtering the GPU wall to one node (its
  8 tiles), going to the alerts' second page (or, where the page has none, nothing).

    python bench/pages_bench.py
    python bench/pages_bench.py --smoke   # 500 trials, 200 incidents, 64 GPUs, no baseline
    # overrides: BENCH_DATABASE_URL, BENCH_REDIS_URL, BASELINE_REV ("" skips it),
    #            BENCH_TRIALS, BENCH_INCIDENTS, BENCH_NODES, BENCH_LOADS, BENCH_LIVE_S
Needs Chromium (/usr/bin/chromium), Postgres and Redis.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import harness

from collectors.localray import free_port
from collectors.records import GpuPoll, GpuProcessRecord, GpuSampleRecord

TRIALS = int(os.environ.get("BENCH_TRIALS", harness.sized("10000", "500")))
INCIDENTS = int(os.environ.get("BENCH_INCIDENTS", harness.sized("5000", "200")))
NODES = int(os.environ.get("BENCH_NODES", harness.sized("512", "8")))
LOADS = int(os.environ.get("BENCH_LOADS", harness.sized("3", "1")))
LIVE_S = float(os.environ.get("BENCH_LIVE_S", harness.sized("10", "3")))
BASELINE_REV = os.environ.get("BASELINE_REV", harness.sized("9daa2af", ""))
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
GPUS_PER_NODE = 8
TRIALS_PER_S, NODES_PER_S, INCIDENTS_PER_S = 1000, 64, 20
USER, PASSWORD = "bench-viewer", "bench-pages-password"
EXPERIMENT = "bench-asha"

# Set before any page script runs: the moment READY first holds, and the main thread's
# long tasks from then on.
WATCH = """(() => {
  window.__readyAt = null; window.__long = [];
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__long.push(e.duration);
  }).observe({ type: "longtask", buffered: true });
  const check = () => {
    try {
      if (window.__ready && window.__ready()) { window.__readyAt = performance.now(); return; }
    } catch (e) {}
    requestAnimationFrame(check);
  };
  requestAnimationFrame(check);
})();"""
PAGES = {
    "trials": ("experiment", "() => document.querySelectorAll('#trials tbody tr').length > 0 "
               "&& /of/.test(document.getElementById('count').textContent)"),
    "alerts": ("/alerts/", "() => document.querySelectorAll('#alerts tbody tr').length > 0 "
               "&& document.getElementById('alert-total').textContent.length > 0"),
    "gpu wall": ("/gpus/", "() => document.querySelectorAll('#gpu-wall .gpu-tile').length > 0 "
                 "&& document.getElementById('gpu-count').textContent.length > 0"),
}


# --- the load ----------------------------------------------------------------------------

def populate(now: datetime) -> dict[str, Any]:
    from django.contrib.auth.models import Group, User

    from dashboard.incidents.findings import Finding
    from dashboard.incidents.service import sync_findings
    from dashboard.trials.models import Experiment, Trial

    rng = random.Random(16)
    user = User.objects.create_user(USER, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    experiment = Experiment.objects.create(name=EXPERIMENT, metric="score", mode="max")
    statuses = ["RUNNING"] * 9 + ["TERMINATED"]
    trials = []
    for i in range(TRIALS):
        score = rng.uniform(0, 100)
        metrics = {"score": score, "loss": 1 / (1 + score), "lr_now": 0.001,
                   "timing_s/gen": rng.uniform(1, 5), "timing_s/reward": rng.uniform(0, 2)}
        trials.append(Trial(
            experiment=experiment, trial_id=f"bench_{i:05d}", status=statuses[i % 10],
            iteration=rng.randrange(1, 500), node_ip=f"10.1.{i % 256}.{i // 256 % 256}",
            hostname=f"gpu-{i % 512:03d}", pid=10_000 + i,
            last_result_at=now - timedelta(seconds=rng.uniform(0, 30)), last_step_s=3.0,
            last_metrics=metrics, metric_range={k: [v * 0.5, v] for k, v in metrics.items()},
            config={"lr": 10 ** rng.uniform(-5, -1), "batch_size": rng.choice([32, 64, 128]),
                    "model": {"arch": rng.choice(["cnn", "mlp", "vit"]),
                              "layers": rng.randrange(2, 12)}, "seed": 7}))
    Trial.objects.bulk_create(trials, batch_size=2000)
    stalled = list(Trial.objects.filter(experiment=experiment).order_by("pk")[:INCIDENTS])
    findings = [Finding("trial_stalled", f"trial:{EXPERIMENT}/{t.trial_id}", "critical",
                        f"no result for {rng.randrange(3, 60)} min") for t in stalled]
    sync_findings({"trial_stalled"}, findings, now,
                  {f.subject: {"trial": t, "experiment": EXPERIMENT, "node_ip": t.node_ip}
                   for f, t in zip(findings, stalled, strict=True)})
    for node in range(NODES):
        gpu_poll(node, now, rng)
    best = max(trials, key=lambda t: t.metric_range["score"][1])
    return {"experiment": experiment.pk, "best": best.trial_id, "incidents": len(findings)}


def gpu_poll(node: int, now: datetime, rng: random.Random) -> None:
    from dashboard.gpus.ingest import ingest_gpu_poll

    name = f"gpu-node-{node:04d}"
    gpus = tuple(GpuSampleRecord(
        node=name, gpu_index=i, uuid=f"GPU-bench-{node:04d}-{i}", at=now,
        name="NVIDIA H100 80GB HBM3", utilization_gpu=round(rng.uniform(0, 100), 1),
        utilization_memory=round(rng.uniform(0, 100), 1), memory_used_bytes=40 << 30,
        memory_total_bytes=80 << 30, temperature_c=float(rng.randint(30, 80)),
        power_w=round(rng.uniform(60, 700), 1), power_limit_w=700.0, sm_clock_mhz=1980,
        memory_clock_mhz=2619, throttle_reasons=(), ecc_corrected=0, ecc_uncorrected=0,
        mig_mode=False, processes=(GpuProcessRecord(pid=20_000 + node * 8 + i,
                                                    used_memory_bytes=40 << 30),))
        for i in range(GPUS_PER_NODE))
    ingest_gpu_poll(GpuPoll(node=name, at=now, gpus=gpus, driver_version="550.54.15"),
                    f"10.2.{node // 256}.{node % 256}", now)


def writer(env: dict[str, str], stop_at: float, done: Any) -> None:
    """The live load, in its own process: trials, GPUs and incidents changing each second."""
    os.environ.update(env)
    import django

    django.setup()
    from django.db.models import Q
    from django.utils import timezone

    from dashboard.incidents.findings import Finding
    from dashboard.incidents.service import sync_findings
    from dashboard.trials.models import Trial
    from dashboard.trials.push import push_updates
    from dashboard.trials.store import IngestStats

    rng = random.Random(61)
    pks = list(Trial.objects.filter(experiment__name=EXPERIMENT).values_list("pk", flat=True))
    node, tick, rounds = 0, 0, 0
    while time.monotonic() < stop_at:
        started = time.monotonic()
        now = timezone.now()
        changed = rng.sample(pks, min(TRIALS_PER_S, len(pks)))
        Trial.objects.filter(pk__in=changed).update(last_result_at=now)
        push_updates(IngestStats(changed_trials=set(changed)))
        for _ in range(min(NODES_PER_S, NODES)):
            gpu_poll(node, now, rng)
            node = (node + 1) % NODES
        # 20 more trials stall, then recover, turn about: incidents open and resolve
        flapping = [Trial.objects.get(pk=pk) for pk in pks[INCIDENTS:INCIDENTS + INCIDENTS_PER_S]]
        found = [Finding("trial_stalled", f"trial:{EXPERIMENT}/{t.trial_id}", "critical",
                         "no result for 3 min") for t in flapping] if tick % 2 == 0 else []
        sync_findings({"trial_stalled"}, found, now,
                      {f.subject: {"trial": t, "experiment": EXPERIMENT}
                       for f, t in zip(found, flapping, strict=False)},
                      among=Q(subject__in=[f"trial:{EXPERIMENT}/{t.trial_id}" for t in flapping]))
        tick, rounds = tick + 1, rounds + 1
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    done.send(rounds)


# --- the servers and the browser ----------------------------------------------------------

def logged_in(browser: Any, base: str) -> dict[str, Any]:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base}/login/?next=/experiments/")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/experiments/")
    state = context.storage_state()
    context.close()
    return state


def open_page(browser: Any, state: dict[str, Any], url: str, ready: str
              ) -> tuple[Any, Any, list[float]]:
    """The page in a fresh context; [ms to ready, ms to the HTML's last byte]."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, storage_state=state)
    context.add_init_script(f"window.__ready = {ready};\n{WATCH}")
    page = context.new_page()
    page.goto(url, wait_until="commit", timeout=120_000)
    page.wait_for_function("window.__readyAt !== null", timeout=120_000, polling=100)
    return context, page, page.evaluate(
        "[window.__readyAt, performance.getEntriesByType('navigation')[0].responseEnd]")


ACTION_TIMEOUT_MS = 30_000


def act(name: str, page: Any, facts: dict[str, Any]) -> float | str | None:
    """Time one action from input to its answer on screen (ms); None: the page has none;
    a page too busy to answer within ACTION_TIMEOUT_MS says so."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        return _act(name, page, facts)
    except PlaywrightTimeout:
        return f"> {ACTION_TIMEOUT_MS:,} (no answer)"


def _act(name: str, page: Any, facts: dict[str, Any]) -> float | None:
    page.set_default_timeout(ACTION_TIMEOUT_MS)
    if name == "trials":
        page.evaluate("window.__t0 = performance.now()")
        page.click('th[data-sort="best"]')
        page.wait_for_function(
            f"document.querySelector('#trials tbody tr').dataset.trialId === '{facts['best']}'",
            polling="raf")
    elif name == "gpu wall":
        page.evaluate("window.__t0 = performance.now()")
        page.fill("#gpu-filter", "gpu-node-0007")
        page.wait_for_function(
            "[...document.querySelectorAll('#gpu-wall .gpu-tile')].filter(t => t.offsetParent"
            " !== null).length === 8", polling="raf")
    elif name == "alerts":
        if not page.locator("#alerts-next").count():
            return None
        first = page.locator("#alerts tbody tr").first.get_attribute("data-incident")
        page.evaluate("window.__t0 = performance.now()")
        page.click("#alerts-next")
        page.wait_for_function(
            f"document.querySelector('#alerts tbody tr').dataset.incident !== '{first}'",
            polling="raf")
    return float(page.evaluate("performance.now() - window.__t0"))


def measure(browser: Any, base: str, env: dict[str, str], facts: dict[str, Any]
            ) -> dict[str, dict[str, Any]]:
    state = logged_in(browser, base)
    figures: dict[str, dict[str, Any]] = {}
    for name, (path, ready) in PAGES.items():
        url = base + (f"/experiments/{facts['experiment']}/" if path == "experiment" else path)
        renders, htmls = [], []
        for _ in range(LOADS):
            context, _page, (at, html) = open_page(browser, state, url, ready)
            renders.append(at)
            htmls.append(html)
            context.close()
        context, page, _ = open_page(browser, state, url, ready)
        time.sleep(3)  # what loads after the first render (the chart's Plotly) is done
        page.evaluate("window.__long = []")
        receive, send = multiprocessing.Pipe(duplex=False)
        live = multiprocessing.get_context("spawn").Process(
            target=writer, args=(env, time.monotonic() + LIVE_S, send))
        live.start()
        time.sleep(LIVE_S / 2)
        acted = act(name, page, facts)
        live.join(LIVE_S * 6)
        rounds = receive.recv() if receive.poll(5) else 0
        long_tasks = page.evaluate("window.__long")
        shown = page.evaluate(
            "document.querySelectorAll('#trials tbody tr, #alerts tbody tr, #gpu-wall .gpu-tile')"
            ".length")
        context.close()
        figures[name] = {"render_ms_median": statistics.median(renders),
                         "html_ms_median": statistics.median(htmls),
                         "render_ms_max": max(renders), "action_ms": acted,
                         "long_tasks_ms_sum": sum(long_tasks),
                         "long_task_ms_max": max(long_tasks, default=0.0),
                         "live_s": LIVE_S, "writer_rounds": rounds, "elements_shown": shown}
    return figures


def main() -> int:
    from playwright.sync_api import sync_playwright

    with ExitStack() as stack:
        database = stack.enter_context(harness.throwaway_database("pages"))
        prefix = f"bench-pages-{os.getpid()}"
        env = harness.setup_django(database, REDIS_URL=REDIS_URL,
                                   RAYWATCH_CHANNEL_PREFIX=prefix)
        from django.utils import timezone

        started = time.monotonic()
        facts = populate(timezone.now())
        print(f"loaded {TRIALS:,} trials, {facts['incidents']:,} open incidents, "
              f"{NODES * GPUS_PER_NODE:,} GPUs in {time.monotonic() - started:.0f} s",
              flush=True)
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pages-bench-")))
        server_env = {**os.environ, **env, "RAY_ADDRESS": f"http://127.0.0.1:{free_port()}",
                      "RAYWATCH_GPU_SOURCE": "off", "RAYWATCH_DATA_DIR": str(tmp)}
        sources: list[tuple[str, Path]] = [("this checkout", harness.REPO)]
        if BASELINE_REV:
            sources.append((f"baseline {BASELINE_REV}",
                            stack.enter_context(harness.worktree(BASELINE_REV, tmp))))
        results: dict[str, Any] = {}
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            for label, source in sources:
                with harness.served(server_env, tmp / f"serve-{len(results)}.log",
                                    "--no-celery", source=source) as base:
                    results[label] = measure(browser, base, env, facts)
            browser.close()
    rows = [[page, label, f["render_ms_median"], f["render_ms_max"], f["html_ms_median"],
             f["action_ms"],
             f["long_tasks_ms_sum"], f["long_task_ms_max"], f["elements_shown"]]
            for label, pages in results.items() for page, f in pages.items()]
    harness.print_table(
        f"Pages at size in Chromium 1440x900: {TRIALS:,} trials, {INCIDENTS:,} open incidents, "
        f"{NODES * GPUS_PER_NODE:,} GPUs; live: {TRIALS_PER_S:,} trial rows, "
        f"{NODES_PER_S * GPUS_PER_NODE} GPU tiles, {INCIDENTS_PER_S} incidents a second "
        f"for {LIVE_S:.0f} s (goal: render under 1,000 ms)",
        ["page", "raywatch", "render ms (median)", "render ms (max)", "of it HTML ms",
         "action ms",
         "long tasks ms (live)", "longest task ms", "rows/tiles in DOM"], rows)
    harness.print_json({"bench": "pages", "trials": TRIALS, "incidents": INCIDENTS,
                        "gpus": NODES * GPUS_PER_NODE, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())

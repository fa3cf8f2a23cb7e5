"""Terminate a hung trial: from the click to the trial's process being gone.

A real local Ray cluster (`collectors.localray.LocalRay`, random ports, 2 CPUs), a
database of this run's own, raywatch's collectors polling the cluster every 0.5 s in
this process (`EmbeddedScheduler` with `poll_ray_state` and `poll_trial_logs`, as the
tests' `watched` fixture runs them), and the embedded mode: no broker, the action runs in
this process's background pool (`dashboard.core.background.run_soon`), as `make run`
does. Each round starts the "terminate" Tune search of tests/tune_scripts/search.py (a
trial that hangs in step 5 but obeys SIGTERM, one that hangs and ignores SIGTERM, two
healthy ones), waits until both hung trials are stuck (RUNNING, iteration 4, pid alive)
and then:

  raywatch rounds  "click": POST /api/trials/{id}/terminate as an operator (DRF's
                   APIClient with a token, in this process), for the obeying trial, then
                   for the ignoring one. t0 = time.time() right before the POST; "gone" =
                   psutil no longer finds the pid (or finds another process under it),
                   polled every 10 ms by a thread of the bench. The action's own steps
                   (GET /api/actions/{id}/: requested, signalled, forced, gone, succeeded,
                   and what Tune made of it) are shown against the same t0.
  baseline rounds  the same kind of processes ended by the bench itself, no raywatch:
                   os.kill(SIGTERM) to the obeying one -> gone (the floor of a graceful
                   end); SIGTERM to the ignoring one (checked still alive 1 s later),
                   then os.kill(SIGKILL) -> gone (the floor of a forced end).

Grace: RAYWATCH_TERMINATE_GRACE_S as shipped (20 s unless the environment sets it), then a
short one (BENCH_SHORT_GRACE_S, 5 s) set on django.conf.settings for the rounds after, to
show click->gone of the ignoring trial follows the grace and the obeying one does not.
Expected: obeying click->gone about the SIGTERM floor (well under the grace); ignoring
click->gone about grace + the force (up to one 0.25 s executor poll + the kill).

A search is ended (SIGTERM to its process group, then SIGKILL) once both of its hung
trials are done with. Cleans up (search process groups, the Ray cluster through
LocalRay.stop(), the database) on the way out, also on failure, Ctrl-C or SIGTERM. Prints
figures; the exit status says only whether the benchmark itself worked. About 2 minutes
on 2 cores with the defaults.

    .venv/bin/python bench/terminate_bench.py
    .venv/bin/python bench/terminate_bench.py --smoke   # one round, 1 s grace, no baseline
    # overrides: BENCH_DATABASE_URL (its server), BENCH_ROUNDS (raywatch rounds per grace
    #            setting and baseline rounds, default 2), BENCH_SHORT_GRACE_S (5),
    #            RAYWATCH_TERMINATE_GRACE_S (the first grace; default as shipped)
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import harness

ROUNDS = int(os.environ.get("BENCH_ROUNDS", harness.sized("2", "1")))
SHORT_GRACE_S = float(os.environ.get("BENCH_SHORT_GRACE_S", harness.sized("5", "1")))
POLL_S = 0.5  # the collectors, as in the tests' `watched` fixture
WATCH_S = 0.01  # the bench's own check for the process being gone
STUCK_TIMEOUT_S = 150.0
BEHAVIOURS = {"hang": "obeys SIGTERM", "stubborn": "ignores SIGTERM"}
LAST_STEPS = ("errored", "ended", "retried", "unknown")  # what Tune made of it
NOISE = ("2 cores shared by the Ray cluster (raylet, GCS, dashboard, 4 trial workers and "
         "the Tune driver), Postgres and this process (collectors every 0.5 s, the action, "
         "the 10 ms watcher): expect tens of percent of noise on the sub-second figures")


# --- processes -------------------------------------------------------------------------------
def start_search(gcs: str, storage: Path, name: str, env: dict[str, str]
                 ) -> subprocess.Popen[bytes]:
    """tests/tune_scripts/search.py's "terminate" scenario, in a session of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.tune_scripts.search", gcs, str(storage), name,
         "terminate"],
        cwd=harness.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**env, "RAY_AUTH_MODE": "token"}, start_new_session=True)


def stop_search(search: subprocess.Popen[bytes]) -> None:
    """The driver's process group: TERM, then KILL. Ray ends the driver's actors with it."""
    if search.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(search.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            search.wait(20)
    with suppress(ProcessLookupError):
        os.killpg(search.pid, signal.SIGKILL)
    search.wait()


def start_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None


class Watcher:
    """Notes time.time() when `pid` stops existing (or a different process holds it),
    checked every 10 ms on a thread of its own; also when it was first seen a zombie."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.created = start_time(pid)
        self.gone_at: float | None = None
        self.zombie_at: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Watcher:
        self.thread.start()
        return self

    def _run(self) -> None:
        import psutil

        while not self.stop.is_set():
            now = time.time()
            try:
                proc = psutil.Process(self.pid)
                if proc.create_time() != self.created:
                    self.gone_at = now
                    return
                if self.zombie_at is None and proc.status() == psutil.STATUS_ZOMBIE:
                    self.zombie_at = now
            except psutil.NoSuchProcess:
                self.gone_at = now
                return
            time.sleep(WATCH_S)

    def wait(self, timeout_s: float) -> float | None:
        self.thread.join(timeout_s)
        self.stop.set()
        return self.gone_at


def wait_for(predicate: Any, timeout_s: float, every_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def stuck(name: str, behaviour: str, search: subprocess.Popen[bytes]) -> Any:
    """The trial of this behaviour in experiment `name` once it stopped reporting."""
    import psutil

    from dashboard.trials.models import Trial

    def found() -> Trial | None:
        if search.poll() is not None:
            raise RuntimeError(f"the search {name} exited ({search.returncode}) before its "
                               f"{behaviour} trial hung")
        trial = (Trial.objects.select_related("experiment")
                 .filter(experiment__name=name, config__behaviour=behaviour,
                         status=Trial.RUNNING, iteration=4, pid__isnull=False).first())
        return trial if trial and psutil.pid_exists(trial.pid) else None
    return wait_for(found, STUCK_TIMEOUT_S, 0.2, f"the {behaviour} trial of {name} to hang")


# --- one raywatch round ----------------------------------------------------------------------
def click(api: Any, trial: Any, grace_s: float) -> dict[str, Any]:
    """POST terminate, time the process's end from t0 = just before the POST, wait for the
    action to succeed (or fail) and for the trial's row to say ERROR. The action's steps
    are read at the end (`read_steps`): its last step comes only after the executor's own
    wait for a Tune retry (tune_outcome, 20 s), which the next click need not wait for."""
    from django.conf import settings

    watcher = Watcher(trial.pid).start()
    t0 = time.time()
    reply = api.post(f"/api/trials/{trial.pk}/terminate",
                     {"reason": "bench: hung in step 5", "expected": {"pid": trial.pid}},
                     format="json")
    replied = time.time()
    if reply.status_code != 202:
        watcher.stop.set()
        raise RuntimeError(f"terminate {trial.trial_id} answered {reply.status_code}: "
                           f"{reply.content[:500]!r}")
    action_id = reply.json()["action_id"]
    gone_at = watcher.wait(grace_s + settings.FORCE_WAIT_S + 30)
    wait_for(lambda: api.get(f"/api/actions/{action_id}/").json()["state"]
             in ("succeeded", "failed"), 60, 0.05, f"action #{action_id} to end")
    errored = row_error_s(trial, t0)
    return {
        "trial_id": trial.trial_id, "pid": trial.pid, "action_id": action_id, "t0": t0,
        "reply_s": replied - t0, "gone_s": None if gone_at is None else gone_at - t0,
        "zombie_s": None if watcher.zombie_at is None else watcher.zombie_at - t0,
        "row_error_s": errored,
    }


def read_steps(api: Any, out: dict[str, Any]) -> None:
    """The action's own record, once its last step (what Tune made of it) is in."""
    from django.utils.dateparse import parse_datetime

    def over() -> dict[str, Any] | None:
        action = api.get(f"/api/actions/{out['action_id']}/").json()
        names = [s["step"] for s in action["steps"]]
        return action if action["state"] == "failed" or any(
            n in names for n in LAST_STEPS) else None
    if harness.SMOKE:  # not the 20 s the executor waits for a Tune retry
        action = api.get(f"/api/actions/{out['action_id']}/").json()
    else:
        action = wait_for(over, 60, 0.2, f"action #{out['action_id']} to record Tune's outcome")
    out["steps"] = {s["step"]: parse_datetime(s["at"]).timestamp() - out["t0"]
                    for s in action["steps"]}
    out.update(state=action["state"], outcome=action["outcome"],
               step_order=[s["step"] for s in action["steps"]],
               force_via=("GCS KillActorViaGcs(force)" if action["target"].get("actor_id")
                          else "SIGKILL"),
               tune=next((n for n in LAST_STEPS if n in out["steps"]), ""))


def stuck_search(label: str, ctx: dict[str, Any]) -> Any:
    """A new "terminate" search, once its hang and stubborn trials are stuck; the
    process carries them as .hang, .stubborn and .ready_s."""
    name = f"bench-{label}"
    started = time.monotonic()
    search = start_search(ctx["gcs"], ctx["storage"], name, ctx["search_env"])
    ctx["searches"].append(search)
    try:
        search.hang = stuck(name, "hang", search)
        search.stubborn = stuck(name, "stubborn", search)
    except BaseException:
        stop_search(search)
        raise
    search.ready_s = time.monotonic() - started
    return search


def raywatch_round(label: str, grace_s: float, ctx: dict[str, Any]) -> dict[str, Any]:
    from django.conf import settings

    settings.TERMINATE_GRACE_S = grace_s
    search = stuck_search(label, ctx)
    try:
        hang, stubborn, ready = search.hang, search.stubborn, search.ready_s
        out = {"label": label, "grace_s": grace_s, "ready_s": ready,
               "hang": click(ctx["api"], hang, grace_s)}
        print(f"  {label}: both stuck {ready:.0f} s after the search started; obeying "
              f"trial gone {fmt(out['hang']['gone_s'])} after the click", flush=True)
        out["stubborn"] = click(ctx["api"], stubborn, grace_s)
        print(f"  {label}: ignoring trial gone {fmt(out['stubborn']['gone_s'])} after the "
              f"click (grace {grace_s:g} s)", flush=True)
    finally:
        stop_search(search)
    return out


# --- one baseline round ----------------------------------------------------------------------
def kill_and_time(pid: int, sig: int, timeout_s: float = 30.0) -> tuple[float | None, float]:
    """os.kill from the bench, then the same 10 ms check as the raywatch rounds:
    (seconds to gone, t0)."""
    watcher = Watcher(pid).start()
    t0 = time.time()
    os.kill(pid, sig)
    gone_at = watcher.wait(timeout_s)
    return None if gone_at is None else gone_at - t0, t0


def row_error_s(trial: Any, t0: float) -> float:
    """Seconds from t0 until raywatch's row of the trial says ERROR (Tune noticed, wrote
    error.txt, and the 0.5 s log poll read it)."""
    from dashboard.trials.models import Trial

    at = wait_for(lambda: Trial.objects.filter(pk=trial.pk, status=Trial.ERROR).exists()
                  and time.time(), 60, 0.05, f"trial {trial.trial_id} to show ERROR")
    return float(at) - t0


def baseline_round(label: str, ctx: dict[str, Any]) -> dict[str, Any]:
    import psutil

    search = stuck_search(label, ctx)
    try:
        hang, stubborn, ready = search.hang, search.stubborn, search.ready_s
        term, t0 = kill_and_time(hang.pid, signal.SIGTERM)
        term_error = row_error_s(hang, t0)
        os.kill(stubborn.pid, signal.SIGTERM)
        time.sleep(1.0)
        ignored = psutil.pid_exists(stubborn.pid) and start_time(stubborn.pid) is not None
        kill, t0 = kill_and_time(stubborn.pid, signal.SIGKILL)
        kill_error = row_error_s(stubborn, t0)
        print(f"  {label}: both stuck {ready:.0f} s after the search started; SIGTERM -> "
              f"gone {fmt(term)}; SIGTERM ignored for 1 s: {'yes' if ignored else 'NO'}; "
              f"SIGKILL -> gone {fmt(kill)}", flush=True)
    finally:
        stop_search(search)
    return {"label": label, "ready_s": ready, "hang_pid": hang.pid, "stubborn_pid": stubborn.pid,
            "sigterm_gone_s": term, "sigterm_ignored_1s": ignored, "sigkill_gone_s": kill,
            "sigterm_row_error_s": term_error, "sigkill_row_error_s": kill_error}


# --- report ----------------------------------------------------------------------------------
def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return f"{1000 * seconds:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def med(values: list[float | None]) -> float | None:
    real = [v for v in values if v is not None]
    return statistics.median(real) if real else None


def since(a: dict[str, Any], start: str) -> float | None:
    """Bench-seen gone minus one of the action's steps."""
    at = a["steps"].get(start)
    return None if a["gone_s"] is None or at is None else a["gone_s"] - at


def report(rounds: list[dict[str, Any]], baselines: list[dict[str, Any]], shipped: float
           ) -> None:
    steps = ["requested", "signalled", "forced", "gone", "succeeded"]
    harness.print_table(
        "Click (POST /api/trials/{id}/terminate) -> ...: seconds from t0, taken right before "
        "the POST. 'gone (bench)': psutil no longer finds the pid (10 ms checks); 'row ERROR': "
        "raywatch's Trial row says ERROR; the other columns are the action's own steps "
        "(GET /api/actions/{id}/)",
        ["round", "trial", "gone (bench)", "202 back", *steps, "row ERROR", "Tune step",
         "state"],
        [[r["label"], f"{b} ({BEHAVIOURS[b]})", fmt(a["gone_s"]), fmt(a["reply_s"]),
          *(fmt(a["steps"][s]) if s in a["steps"] else "-" for s in steps),
          fmt(a["row_error_s"]),
          f"{a['tune']} {fmt(a['steps'].get(a['tune']))}" if a["tune"] else "-", a["state"]]
         for r in rounds for b in ("hang", "stubborn") for a in (r[b],)])
    forced = {r[b]["force_via"] for r in rounds for b in ("hang", "stubborn")
              if "forced" in r[b]["steps"]}
    print(f"   forced through: {', '.join(sorted(forced)) or 'nothing was forced'}")
    zombies = [(r["label"], b, r[b]["zombie_s"]) for r in rounds for b in ("hang", "stubborn")
               if r[b]["zombie_s"] is not None]
    if zombies:
        print("   seen as a zombie (ended, not yet reaped) before it was gone: " + "; ".join(
            f"{lab} {b} at {fmt(z)}" for lab, b, z in zombies))
    orders = {" > ".join(r[b]["step_order"]) for r in rounds for b in ("hang", "stubborn")}
    print("   step sequences seen: " + " | ".join(sorted(orders)))

    harness.print_table(
        "BASELINE: the same kind of process ended by the bench itself (os.kill, no raywatch); "
        "'row ERROR' from the os.kill",
        ["round", "SIGTERM -> gone (obeying)", "row ERROR", "SIGTERM ignored 1 s",
         "SIGKILL -> gone (ignoring)", "row ERROR"],
        [[b["label"], fmt(b["sigterm_gone_s"]), fmt(b["sigterm_row_error_s"]),
          b["sigterm_ignored_1s"], fmt(b["sigkill_gone_s"]), fmt(b["sigkill_row_error_s"])]
         for b in baselines])

    floor_term = med([b["sigterm_gone_s"] for b in baselines])
    floor_kill = med([b["sigkill_gone_s"] for b in baselines])
    rows = []
    for grace in sorted({r["grace_s"] for r in rounds}, reverse=True):
        mine = [r for r in rounds if r["grace_s"] == grace]
        label = f"{grace:g} s" + (" (as shipped)" if grace == shipped else "")
        o = [r["hang"] for r in mine]
        i = [r["stubborn"] for r in mine]
        ignore = med([a["gone_s"] for a in i])
        rows.append([
            label, len(mine),
            fmt(med([a["gone_s"] for a in o])), fmt(med([since(a, "signalled") for a in o])),
            fmt(floor_term), fmt(med([a["steps"].get("succeeded") for a in o])),
            fmt(ignore), fmt(None if ignore is None else ignore - grace),
            fmt(med([since(a, "forced") for a in i])), fmt(floor_kill),
            fmt(med([a["steps"].get("succeeded") for a in i]))])
    harness.print_table(
        "Summary: click -> process gone, beside the grace setting (medians over the rounds; "
        "floors from the baseline rounds)",
        ["grace", "n", "OBEYING click->gone", "signalled->gone", "floor SIGTERM->gone",
         "click->succeeded", "IGNORING click->gone", "minus grace", "forced->gone",
         "floor SIGKILL->gone", "click->succeeded"],
        rows)
    print(f"\n{NOISE}")


def quiet_background() -> None:
    import logging

    for name in ("dashboard.actions.executor", "dashboard.core.background"):
        logging.getLogger(name).disabled = True


def main() -> int:
    # A TERM unwinds like Ctrl-C: searches, the Ray cluster and the database are cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # The embedded mode (no broker): the action runs in this process's background pool.
    os.environ.pop("REDIS_URL", None)
    os.environ.pop("RAY_ADDRESS", None)  # would make the driver join another cluster
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    print(NOISE)
    started = time.perf_counter()
    rounds: list[dict[str, Any]] = []
    baselines: list[dict[str, Any]] = []
    searches: list[subprocess.Popen[bytes]] = []
    with ExitStack() as stack:
        url = stack.enter_context(harness.throwaway_database("terminate"))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="terminate-bench-")))
        storage = tmp / "ray_results"
        storage.mkdir()
        from collectors.localray import LocalRay

        # A Ray temp dir of its own, not /tmp/ray: removed after the cluster stops.
        ray_tmp = Path(tempfile.mkdtemp(prefix="rwtb-", dir="/tmp"))  # short: socket paths
        stack.callback(shutil.rmtree, ray_tmp, ignore_errors=True)
        local = LocalRay(tmp / "local-ray.json", num_cpus=2, temp_dir=ray_tmp)
        stack.callback(local.stop)
        cluster = local.start(log_path=tmp / "local-ray.log")
        print(f"Ray cluster up in {time.perf_counter() - started:.0f} s: GCS "
              f"{cluster.gcs_address}, dashboard {cluster.dashboard_url}", flush=True)
        # Environment of the search: without raywatch's own settings below.
        search_env = dict(os.environ)
        extra = {
            "RAYWATCH_DATA_DIR": str(tmp),
            "RAY_API_SERVER_ADDRESS": cluster.dashboard_url,
            "RAY_GCS_ADDRESS": cluster.gcs_address,
            "RAYWATCH_LOG_DIRS": f"{storage}:{Path(cluster.session_dir) / 'artifacts'}",
            "RAYWATCH_POLL_RAY_S": str(POLL_S), "RAYWATCH_POLL_LOGS_S": str(POLL_S),
            "RAYWATCH_STALL_MIN_S": "6", "RAYWATCH_GONE_GRACE_S": "3",
            "RAYWATCH_SLOW_MIN_EXCESS_S": "2", "RAYWATCH_GPU_SOURCE": "off",
            # 2 clicks a round, several rounds: stay clear of the 10 per minute per user.
            "RAYWATCH_ACTION_RATE": "1000",
        }
        harness.setup_django(url, **extra)
        # Interrupted mid-round, an action may still be running in the background pool
        # when the database is dropped: leave its failure out of the output.
        stack.callback(quiet_background)
        stack.callback(lambda: [stop_search(s) for s in searches])

        from django.conf import settings
        from django.contrib.auth.models import Group, User
        from knox.models import AuthToken
        from rest_framework.test import APIClient

        from dashboard.celery import app as celery_app
        from dashboard.core.scheduler import EmbeddedScheduler

        if settings.EMBEDDED is not True:
            raise RuntimeError("REDIS_URL is set: the bench runs raywatch embedded")
        shipped = float(settings.TERMINATE_GRACE_S)
        # Smoke: one round at the short grace, no baseline round.
        graces = harness.sized([shipped, SHORT_GRACE_S], [SHORT_GRACE_S])
        print(f"bench database: {url} (dropped at the end); grace settings: "
              f"{shipped:g} s (RAYWATCH_TERMINATE_GRACE_S"
              f"{'' if 'RAYWATCH_TERMINATE_GRACE_S' in os.environ else ', as shipped'}), "
              f"then {SHORT_GRACE_S:g} s; force wait {settings.FORCE_WAIT_S:g} s; "
              f"{ROUNDS} round(s) each", flush=True)

        user = User.objects.create_user(username="bench-operator", password="x" * 20)
        user.groups.add(Group.objects.get_or_create(name="operator")[0])
        api = APIClient(HTTP_HOST="127.0.0.1")
        api.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user)[1]}")

        scheduler = EmbeddedScheduler(celery_app, {
            "ray": {"task": "dashboard.cluster.tasks.poll_ray_state", "schedule": POLL_S},
            "logs": {"task": "dashboard.trials.tasks.poll_trial_logs", "schedule": POLL_S},
        })
        scheduler.start()
        stack.callback(scheduler.stop)

        ctx = {"gcs": cluster.gcs_address, "storage": storage, "api": api,
               "search_env": search_env, "searches": searches}
        for n in range(1, ROUNDS + 1):
            for grace in graces:
                rounds.append(raywatch_round(f"grace{grace:g}-r{n}", grace, ctx))
            if not harness.SMOKE:
                baselines.append(baseline_round(f"baseline-r{n}", ctx))
        for r in rounds:
            for behaviour in ("hang", "stubborn"):
                read_steps(api, r[behaviour])
    wall = time.perf_counter() - started
    report(rounds, baselines, shipped)
    print(f"whole run: {wall:.0f} s")
    harness.print_json({"bench": "terminate_bench", "rounds": rounds, "baselines": baselines,
                        "shipped_grace_s": shipped, "short_grace_s": SHORT_GRACE_S,
                        "wall_s": wall})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Alerts: from an incident opening to the webhook request, and notifications per second.

1. Incident -> webhook latency, group wait 0, through the production topology: a Celery
   worker on the default queue (`celery -A dashboard worker --concurrency 2`, prefork, as
   docker-compose runs it) and a notify worker (`celery -A dashboard worker -Q notify
   --pool threads --concurrency 8`), Postgres, Redis as the broker, a generic "webhook"
   Channel pointing at a loopback receiver in this process. This process plays the
   detector: it opens N incidents one at a time, each for its own experiment (its own
   group, its own message), a random pause between them, with
   `dashboard.incidents.service.sync_findings`. Latency = the receiver's time.time() when
   the request body has arrived - time.time() taken inside the transaction right before
   its COMMIT. Three rows, in this order:
     kick         the after-commit kick (route_alerts task, then send_channel), no beat;
     kick + tick  the same with `celery -A dashboard beat` running too (production);
     tick only    (baseline) kicks lost: `kick_router` is a no-op in this process, so only
                  beat's `route-alerts` tick (RAYWATCH_ALERT_TICK_S, 1 s) routes; the
                  worker still kicks the sender.
   Beat sends its whole schedule (Ray, trial logs, GPU dispatch, detectors, retention):
   the default worker runs those too, against an empty database and no Ray.
2. Notifications per second through ONE notify worker (threads pool, concurrency 8): M
   pending Delivery rows (realistic messages of 3 incidents, built by the product's
   build_message from real Incident rows) over 6 webhook channels, all pointing at ONE
   loopback receiver (a path per channel) that answers 200 at once; one send_channel task
   per channel is enqueued and the clock stops at the last `sent_at`. Baselines in the same
   run, the same rows reset to pending each time: `delivery.drain(channel)` in this
   process (one thread, channels one after another; and 6 threads, one per channel), the
   product's `transports.post()` in a loop (no database), and a plain single-threaded
   http.client loop POSTing the same bodies (the transport floor; a new connection per
   request, as post() does).

Runs in a database of its own (created, migrated, dropped at the end, also on failure),
Redis db 13 unless BENCH_REDIS_URL says otherwise (flushed before and after). Prints
figures; the exit status says only whether the benchmark itself worked. ~3 min on 2 cores.

    .venv/bin/python bench/alert_bench.py
    .venv/bin/python bench/alert_bench.py --smoke   # 2 incidents a row, 12 deliveries
    # overrides: BENCH_DATABASE_URL (its server), BENCH_REDIS_URL, BENCH_INCIDENTS,
    #            BENCH_DELIVERIES, BENCH_SEED
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import harness

from tests.receivers import Receiver  # the receiver the alert tests use

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/13"
INCIDENTS = int(os.environ.get("BENCH_INCIDENTS", harness.sized("60", "2")))
WARMUP = harness.sized(2, 1)  # incidents per row before the measured ones, not counted
DELIVERIES = int(os.environ.get("BENCH_DELIVERIES", harness.sized("600", "12")))
CHANNELS = 6
PAUSE_S = harness.sized((0.2, 0.8), (0.05, 0.1))  # between two incidents
SEED = int(os.environ.get("BENCH_SEED", "7"))
ARRIVAL_GRACE_S = 10.0  # how long after the last incident a message may still come
TARGET_P95_S = 2.0
NOISE = ("2 cores shared with Postgres, Redis, the workers and possibly other engineers' "
         "test runs: expect tens of percent of noise between runs")


# --- Celery processes ----------------------------------------------------------------------
@dataclass
class Proc:
    role: str
    popen: subprocess.Popen[bytes]
    log: IO[bytes]

    def cpu_s(self) -> float:
        """CPU seconds of the process and its children (prefork pool) so far."""
        import psutil

        try:
            root = psutil.Process(self.popen.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def tail(self, lines: int = 30) -> str:
        self.log.flush()
        self.log.seek(0)
        return "\n".join(self.log.read().decode(errors="replace").splitlines()[-lines:])


@contextmanager
def celery_process(role: str, args: list[str], env: dict[str, str]) -> Iterator[Proc]:
    """`python -m celery -A dashboard ARGS`, in a session of its own so that its pool
    children can be stopped with it; stopped (TERM, then KILL) on the way out."""
    log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    popen = subprocess.Popen([sys.executable, "-m", "celery", "-A", "dashboard", *args],
                             cwd=harness.REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    proc = Proc(role, popen, log)
    try:
        yield proc
    finally:
        if popen.poll() is None:
            popen.terminate()
            with suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=20)
        # The group this run started: the worker and whatever pool children remain.
        with suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
        log.close()


def worker(name: str, env: dict[str, str], *extra: str) -> list[str]:
    return ["worker", "-n", f"{name}@%h", "--loglevel", "WARNING", "--without-gossip",
            "--without-mingle", *extra]


def wait_for_workers(procs: list[Proc], names: list[str], timeout: float = 90.0) -> None:
    from dashboard.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.role} exited with {proc.popen.returncode}:\n"
                                   f"{proc.tail()}")
        replies = app.control.ping(timeout=1.0) or []
        seen = {host.split("@")[0] for reply in replies for host in reply}
        if set(names) <= seen:
            return
    raise RuntimeError(f"workers {names} did not answer a ping within {timeout:.0f} s")


def wait_for_beat(beat: Proc, timeout: float = 60.0) -> None:
    """Beat is ticking once it has logged sending route-alerts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if beat.popen.poll() is not None:
            raise RuntimeError(f"beat exited with {beat.popen.returncode}:\n{beat.tail()}")
        if "dashboard.alerts.tasks.route_alerts" in beat.tail(200):
            return
        time.sleep(0.2)
    raise RuntimeError(f"beat sent no route-alerts within {timeout:.0f} s:\n{beat.tail()}")


# --- small helpers -------------------------------------------------------------------------
def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def spread_ms(values_s: list[float]) -> dict[str, float]:
    if not values_s:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "max_ms": float("nan"), "n": 0}
    ms = [1000 * v for v in values_s]
    return {"p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95), "max_ms": max(ms),
            "n": len(ms)}


def cpu_self() -> float:
    t = os.times()
    return t.user + t.system


@contextmanager
def kicks_lost() -> Iterator[None]:
    """Kicks from this process are lost (as when Redis was briefly unreachable): only the
    periodic tick routes. Only this process is patched; the worker still kicks senders."""
    from dashboard.alerts import tasks as kick

    original = kick.kick_router
    kick.kick_router = lambda: None
    try:
        yield
    finally:
        kick.kick_router = original


# --- 1. incident -> webhook ----------------------------------------------------------------
def open_incident(kind: str, findings: list[Any], context: dict[str, dict[str, Any]]) -> float:
    """One detector evaluation that opens the newest finding; returns time.time() taken
    inside the transaction right before COMMIT (the kick runs from on_commit, after it)."""
    from django.db import transaction
    from django.utils import timezone

    from dashboard.incidents.service import sync_findings

    with transaction.atomic():
        result = sync_findings([kind], findings, timezone.now(), context)
        if result["opened"] != 1:
            raise RuntimeError(f"sync_findings opened {result['opened']} incidents, not 1")
        before_commit = time.time()
    return before_commit


def latency_row(label: str, receiver: Receiver, procs: list[Proc],
                rng: random.Random) -> dict[str, Any]:
    """Open WARMUP + INCIDENTS incidents one at a time, each its own experiment; wait for
    their messages; return the latencies and their split at the router's Delivery row."""
    from dashboard.alerts.models import Channel, Delivery
    from dashboard.incidents.findings import Finding

    path = f"/hook/{label}"
    channel = Channel.objects.create(name=f"bench-{label}", kind="webhook",
                                     url=receiver.url_for(path))
    kind = f"bench_trial_stalled_{label.replace('-', '_')}"
    findings: list[Finding] = []
    context: dict[str, dict[str, Any]] = {}
    started: dict[str, float] = {}
    cpu_before = {p.role: p.cpu_s() for p in procs} | {"bench": cpu_self()}
    wall = time.monotonic()
    for i in range(WARMUP + INCIDENTS):
        experiment = f"{label}-exp-{i:03d}"
        subject = f"trial:{experiment}/train_fn_{i:05d}"
        findings.append(Finding(
            kind=kind, subject=subject, severity="critical",
            summary="no result for 312 s (5.2x its median step of 60 s)",
            details={"last_result_s": 312.0, "median_step_s": 60.0, "factor": 5.2}))
        context[subject] = {"experiment": experiment, "node_ip": f"10.0.0.{i % 250 + 1}"}
        # The detector reports every current finding each time, as health.py does.
        started[experiment] = open_incident(kind, findings, context)
        time.sleep(rng.uniform(*PAUSE_S))
    deadline = time.monotonic() + ARRIVAL_GRACE_S
    while time.monotonic() < deadline:
        got = {a.json["incidents"][0]["experiment"] for a in receiver.requests
               if a.path == path}
        if set(started) <= got:
            break
        time.sleep(0.1)
    wall = time.monotonic() - wall
    cpu = {p.role: p.cpu_s() - cpu_before[p.role] for p in procs}
    cpu["bench"] = cpu_self() - cpu_before["bench"]
    channel.disabled = True
    channel.save(update_fields=["disabled"])

    first: dict[str, float] = {}
    copies = 0
    for a in receiver.requests:
        if a.path != path:
            continue
        experiment = a.json["incidents"][0]["experiment"]
        if experiment in first:
            copies += 1
        else:
            first[experiment] = a.at
    measured = [f"{label}-exp-{i:03d}" for i in range(WARMUP, WARMUP + INCIDENTS)]
    rows = {r["group_key"].removeprefix("experiment:"): r
            for r in Delivery.objects.filter(channel=channel)
            .values("group_key", "created_at", "sent_at")}
    latency = [first[e] - started[e] for e in measured if e in first]
    to_routed = [rows[e]["created_at"].timestamp() - started[e] for e in measured if e in rows]
    routed_to_rx = [first[e] - rows[e]["created_at"].timestamp()
                    for e in measured if e in rows and e in first]
    return {
        "label": label, "latency": spread_ms(latency),
        "commit_to_router": spread_ms(to_routed), "router_to_receiver": spread_ms(routed_to_rx),
        "lost": sum(1 for e in measured if e not in first), "duplicates": copies,
        "wall_s": wall, "cpu_s": cpu,
    }


def incident_latency(env: dict[str, str], receiver: Receiver, tmp: Path) -> list[dict[str, Any]]:
    from django.conf import settings

    rng = random.Random(SEED)
    rows = []
    pid = os.getpid()
    names = [f"bench-default-{pid}", f"bench-notify-{pid}"]
    with ExitStack() as stack:
        default = stack.enter_context(celery_process(
            "default worker", worker(names[0], env, "--concurrency", "2"), env))
        notify = stack.enter_context(celery_process(
            "notify worker", worker(names[1], env, "-Q", settings.NOTIFY_QUEUE,
                                    "--pool", "threads", "--concurrency", "8"), env))
        wait_for_workers([default, notify], names)
        print("workers up: default queue (prefork, 2) and notify (threads, 8); "
              f"{INCIDENTS} incidents a row, {WARMUP} unmeasured first", flush=True)
        rows.append(latency_row("kick", receiver, [default, notify], rng))
        report_latency_row(rows[-1])
        beat = stack.enter_context(celery_process(
            "beat", ["beat", "--loglevel", "INFO", "--schedule",
                     str(tmp / "celerybeat-schedule")], env))
        wait_for_beat(beat)
        rows.append(latency_row("kick-and-tick", receiver, [default, notify, beat], rng))
        report_latency_row(rows[-1])
        with kicks_lost():
            rows.append(latency_row("tick-only", receiver, [default, notify, beat], rng))
        report_latency_row(rows[-1])
    return rows


def report_latency_row(row: dict[str, Any]) -> None:
    lat = row["latency"]
    print(f"  {row['label']:<14} p50 {lat['p50_ms']:7.0f} ms  p95 {lat['p95_ms']:7.0f} ms  "
          f"max {lat['max_ms']:7.0f} ms  n {lat['n']}  lost {row['lost']}  "
          f"({row['wall_s']:.0f} s)", flush=True)


# --- 2. notifications per second -----------------------------------------------------------
def make_deliveries(receiver: Receiver) -> tuple[list[int], list[bytes]]:
    """DELIVERIES pending rows over CHANNELS webhook channels (one receiver, a path each),
    each a realistic message of 3 firing incidents of one experiment."""
    from django.utils import timezone

    from dashboard.alerts.messages import build_message
    from dashboard.alerts.models import Channel, Delivery
    from dashboard.incidents.models import Incident

    now = timezone.now()
    channels = [Channel.objects.create(name=f"bench-rate-{c}", kind="webhook",
                                       url=receiver.url_for(f"/rate/{c}"))
                for c in range(CHANNELS)]
    rows: list[Delivery] = []
    links: list[tuple[int, list[int]]] = []
    per_channel = math.ceil(DELIVERIES / CHANNELS)
    for n in range(DELIVERIES):
        experiment = f"rate-exp-{n:04d}"
        incidents = [Incident.objects.create(
            kind="trial_stalled", subject=f"trial:{experiment}/train_fn_{n:04d}_{k}",
            severity="critical", summary="no result for 312 s (5.2x its median step of 60 s)",
            details={"last_result_s": 312.0, "median_step_s": 60.0}, opened_at=now,
            updated_at=now, group_key=f"experiment:{experiment}", experiment=experiment,
            node_ip=f"10.0.{n // 250}.{n % 250 + 1}") for k in range(3)]
        message = build_message(f"experiment:{experiment}", incidents, [],
                                {i.pk for i in incidents})
        rows.append(Delivery(channel=channels[n // per_channel], group_key="bench",
                             status="firing", message=message, next_attempt_at=now,
                             created_at=now))
        links.append((n, [i.pk for i in incidents]))
    Delivery.objects.bulk_create(rows)
    for d in rows:
        d.message["id"] = str(d.pk)
    Delivery.objects.bulk_update(rows, ["message"])
    through = Delivery.incidents.through
    through.objects.bulk_create([through(delivery_id=rows[n].pk, incident_id=pk)
                                 for n, pks in links for pk in pks])
    bodies = [json.dumps(d.message, separators=(",", ":")).encode() for d in rows]
    return [c.pk for c in channels], bodies


def reset_deliveries(receiver: Receiver) -> None:
    from django.utils import timezone

    from dashboard.alerts.models import Delivery

    Delivery.objects.filter(group_key="bench").update(
        state=Delivery.PENDING, attempts=0, claimed_at=None, claim_token="", sent_at=None,
        response_code=None, last_error="", next_attempt_at=timezone.now())
    receiver.requests.clear()


def wait_all_sent(timeout: float = 180.0) -> None:
    from django.db.models import Count

    from dashboard.alerts.models import Delivery

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Delivery.objects.filter(group_key="bench").exclude(state=Delivery.SENT).exists():
            return
        time.sleep(0.05)
    states = dict(Delivery.objects.filter(group_key="bench").values_list("state")
                  .annotate(n=Count("id")).order_by())
    raise RuntimeError(f"not all deliveries were sent within {timeout:.0f} s: {states}")


def sent_figures(label: str, t0: float, receiver: Receiver, extra: dict[str, Any]
                 ) -> dict[str, Any]:
    """Rate from t0 to the last sent_at; checks every row went out once, in order."""
    from django.db.models import Max, Min

    from dashboard.alerts.models import Delivery

    qs = Delivery.objects.filter(group_key="bench")
    agg = qs.aggregate(first=Min("sent_at"), last=Max("sent_at"))
    last = agg["last"].timestamp()
    first = agg["first"].timestamp()
    ids = [a.json["id"] for a in receiver.requests if a.path.startswith("/rate/")]
    in_order = True
    for c in range(CHANNELS):
        seq = [int(a.json["id"]) for a in receiver.requests if a.path == f"/rate/{c}"]
        in_order &= seq == sorted(seq)
    n = qs.count()
    return {
        "label": label, "n": n, "elapsed_s": last - t0, "per_s": n / (last - t0),
        "steady_per_s": (n - 1) / (last - first) if last > first else float("nan"),
        "received": len(ids), "duplicates": len(ids) - len(set(ids)),
        "in_order_per_channel": in_order, **extra,
    }


def celery_rate(env: dict[str, str], receiver: Receiver, channel_ids: list[int]
                ) -> dict[str, Any]:
    from django.conf import settings

    from dashboard.alerts.tasks import kick_sender

    reset_deliveries(receiver)
    name = f"bench-rate-notify-{os.getpid()}"
    with celery_process("notify worker", worker(name, env, "-Q", settings.NOTIFY_QUEUE,
                                                "--pool", "threads", "--concurrency", "8"),
                        env) as notify:
        wait_for_workers([notify], [name])
        cpu_before, bench_before = notify.cpu_s(), cpu_self()
        t0 = time.time()
        for channel_id in channel_ids:
            kick_sender(channel_id)  # send_channel on the notify queue, as the router does
        wait_all_sent()
        cpu = notify.cpu_s() - cpu_before
        bench_cpu = cpu_self() - bench_before
    return sent_figures("celery", t0, receiver, {"worker_cpu_s": cpu, "bench_cpu_s": bench_cpu})


def drain_rate(receiver: Receiver, channel_ids: list[int], threads: int) -> dict[str, Any]:
    """`delivery.drain` in this process, no Celery: one thread taking the channels one
    after another, or one thread per channel."""
    from django.db import connections

    from dashboard.alerts.delivery import drain

    reset_deliveries(receiver)

    def drain_and_close(channel_id: int) -> None:
        try:
            drain(channel_id)
        finally:
            connections.close_all()

    cpu_before = cpu_self()
    t0 = time.time()
    if threads == 1:
        for channel_id in channel_ids:
            drain(channel_id)
    else:
        workers = [threading.Thread(target=drain_and_close, args=(c,)) for c in channel_ids]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    wait_all_sent(5)
    return sent_figures(f"drain x{threads}", t0, receiver, {"bench_cpu_s": cpu_self() - cpu_before})


def post_loop(label: str, receiver: Receiver, bodies: list[bytes],
              send: Callable[[str, bytes], None]) -> dict[str, Any]:
    receiver.requests.clear()
    t0 = time.perf_counter()
    for n, body in enumerate(bodies):
        send(f"/rate/{n * CHANNELS // len(bodies)}", body)
    elapsed = time.perf_counter() - t0
    if len(receiver.requests) != len(bodies):
        raise RuntimeError(f"{label}: {len(receiver.requests)} of {len(bodies)} arrived")
    return {"label": label, "n": len(bodies), "elapsed_s": elapsed,
            "per_s": len(bodies) / elapsed}


def raw_posts(receiver: Receiver, bodies: list[bytes]) -> dict[str, Any]:
    """The floor: plain http.client, one thread, a new connection per POST (as post())."""
    def send(path: str, body: bytes) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            reply.read()
            if reply.status != 200:
                raise RuntimeError(f"receiver answered {reply.status}")
        finally:
            conn.close()

    return post_loop("raw http.client", receiver, bodies, send)


def product_posts(receiver: Receiver, bodies: list[bytes]) -> dict[str, Any]:
    """dashboard.alerts.transports.post() with the same bodies: the product's HTTP code
    (SSRF check on the connected socket, deadlines), no database."""
    from dashboard.alerts.transports import post

    def send(path: str, body: bytes) -> None:
        reply = post(receiver.url_for(path), body, {}, 10.0, allow_private=True)
        if reply.status != 200:
            raise RuntimeError(f"receiver answered {reply.status}")

    return post_loop("transports.post()", receiver, bodies, send)


def throughput(env: dict[str, str], receiver: Receiver) -> dict[str, Any]:
    channel_ids, bodies = make_deliveries(receiver)
    size = sum(map(len, bodies)) / len(bodies)
    print(f"\n{DELIVERIES} pending deliveries over {CHANNELS} webhook channels (one receiver, "
          f"a path per channel), {size / 1024:.1f} KiB JSON each", flush=True)
    results = {"body_bytes": size}
    for key, run in (("celery", lambda: celery_rate(env, receiver, channel_ids)),
                     ("drain_1", lambda: drain_rate(receiver, channel_ids, 1)),
                     ("drain_6", lambda: drain_rate(receiver, channel_ids, CHANNELS)),
                     ("post", lambda: product_posts(receiver, bodies)),
                     ("raw", lambda: raw_posts(receiver, bodies))):
        results[key] = run()
        r = results[key]
        print(f"  {r['label']:<18} {r['per_s']:7.1f} /s  ({r['n']} in {r['elapsed_s']:.2f} s)",
              flush=True)
    return results


# --- report --------------------------------------------------------------------------------
def report(lat_rows: list[dict[str, Any]], rate: dict[str, Any]) -> None:
    names = {"kick": "kick, no beat",
             "kick-and-tick": "kick + 1 s beat tick (production)",
             "tick-only": "BASELINE: kicks lost, 1 s beat tick only"}
    harness.print_table(
        f"1. Incident opened (just before COMMIT) -> webhook body received, group wait 0; "
        f"{INCIDENTS} incidents a row, pauses {PAUSE_S[0]}-{PAUSE_S[1]} s; "
        "default worker prefork x2 + notify worker threads x8",
        ["path", "n", "p50 ms", "p95 ms", "max ms", "lost", "dup", "p95 < 2 s"],
        [[names[r["label"]], r["latency"]["n"], r["latency"]["p50_ms"],
          r["latency"]["p95_ms"], r["latency"]["max_ms"], r["lost"], r["duplicates"],
          r["latency"]["p95_ms"] < 1000 * TARGET_P95_S] for r in lat_rows])
    harness.print_table(
        "   split at the router's Delivery.created_at (the route_alerts task's start time)",
        ["path", "commit->router p50", "p95", "router->receiver p50", "p95"],
        [[names[r["label"]], r["commit_to_router"]["p50_ms"], r["commit_to_router"]["p95_ms"],
          r["router_to_receiver"]["p50_ms"], r["router_to_receiver"]["p95_ms"]]
         for r in lat_rows])
    roles = ["default worker", "notify worker", "beat", "bench"]
    harness.print_table(
        "   CPU seconds during each row (2 cores here; bench = this process: the detector "
        "and the receiver)",
        ["path", "wall s", *roles],
        [[names[r["label"]], r["wall_s"], *(r["cpu_s"].get(k, 0.0) for k in roles)]
         for r in lat_rows])

    c = rate["celery"]
    harness.print_table(
        f"2. Notifications per second: {DELIVERIES} deliveries, {CHANNELS} webhook channels, "
        "one loopback receiver answering 200 at once",
        ["path", "n", "seconds", "per s", "first->last per s", "x of raw"],
        [["1 notify worker, threads x8 (send_channel per channel)", c["n"], c["elapsed_s"],
          c["per_s"], c["steady_per_s"], c["per_s"] / rate["raw"]["per_s"]],
         ["drain() in-process, 1 thread, channels in turn", rate["drain_1"]["n"],
          rate["drain_1"]["elapsed_s"], rate["drain_1"]["per_s"],
          rate["drain_1"]["steady_per_s"], rate["drain_1"]["per_s"] / rate["raw"]["per_s"]],
         ["drain() in-process, 6 threads (one per channel)", rate["drain_6"]["n"],
          rate["drain_6"]["elapsed_s"], rate["drain_6"]["per_s"],
          rate["drain_6"]["steady_per_s"], rate["drain_6"]["per_s"] / rate["raw"]["per_s"]],
         ["transports.post() loop, 1 thread, no DB", rate["post"]["n"],
          rate["post"]["elapsed_s"], rate["post"]["per_s"], "", rate["post"]["per_s"] /
          rate["raw"]["per_s"]],
         ["FLOOR: raw http.client loop, 1 thread", rate["raw"]["n"], rate["raw"]["elapsed_s"],
          rate["raw"]["per_s"], "", 1.0]])
    checks = [(r["label"], r["received"], r["duplicates"], r["in_order_per_channel"])
              for r in (c, rate["drain_1"], rate["drain_6"])]
    print("   every row went out once and in id order per channel: "
          + "; ".join(f"{lab}: {n} received, {d} duplicates, in order {'yes' if o else 'NO'}"
                      for lab, n, d, o in checks))
    print(f"   notify worker CPU {c['worker_cpu_s']:.1f} s for {c['n']} deliveries "
          f"({1000 * c['worker_cpu_s'] / c['n']:.1f} ms each); receiver (this process) "
          f"{c['bench_cpu_s']:.1f} s")

    kick = next(r for r in lat_rows if r["label"] == "kick")
    tick = next(r for r in lat_rows if r["label"] == "tick-only")
    harness.print_table(
        "Summary (what was compared with what)",
        ["figure", "project", "compared with", "baseline"],
        [["incident -> webhook p95 (target < 2 s)", f"{kick['latency']['p95_ms']:.0f} ms",
          "1 s tick only, kicks lost", f"{tick['latency']['p95_ms']:.0f} ms"],
         ["incident -> webhook p50", f"{kick['latency']['p50_ms']:.0f} ms",
          "1 s tick only, kicks lost", f"{tick['latency']['p50_ms']:.0f} ms"],
         ["deliveries/s, 1 notify worker", f"{c['per_s']:.0f}/s",
          "raw http.client, 1 thread", f"{rate['raw']['per_s']:.0f}/s"],
         ["deliveries/s, drain() 1 thread", f"{rate['drain_1']['per_s']:.0f}/s",
          "raw http.client, 1 thread", f"{rate['raw']['per_s']:.0f}/s"]])
    print(f"\n{NOISE}")


def main() -> int:
    # A TERM unwinds like Ctrl-C, so the workers, beat and the database are still cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    redis_url = os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    print(NOISE)
    started = time.perf_counter()
    with ExitStack() as stack:
        url = stack.enter_context(harness.throwaway_database("alerts"))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="alert-bench-")))
        (tmp / "logs").mkdir()
        extra = {
            "REDIS_URL": redis_url, "RAYWATCH_DATA_DIR": str(tmp),
            "RAYWATCH_WEBHOOK_ALLOW_PRIVATE": "1", "RAYWATCH_ALERT_GROUP_WAIT_S": "0",
            "RAYWATCH_CHANNEL_PREFIX": f"raywatch-alert-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}",
            # beat's other tasks run against nothing: no Ray, an empty log tree, no agents.
            "RAYWATCH_LOG_DIRS": str(tmp / "logs"), "RAYWATCH_RAY_TMP_DIR": str(tmp / "logs"),
            "RAYWATCH_GPU_SOURCE": "off", "RAYWATCH_BASE_URL": "https://raywatch.example.org",
        }
        env = {**os.environ, **harness.setup_django(url, **extra)}
        flush_redis(redis_url)
        stack.callback(flush_redis, redis_url)
        print(f"bench database: {url} (dropped at the end); broker and channel layer: "
              f"{redis_url}", flush=True)
        receiver = Receiver().start()
        stack.callback(receiver.stop)
        lat_rows = incident_latency(env, receiver, tmp)
        rate = throughput(env, receiver)
    wall = time.perf_counter() - started
    report(lat_rows, rate)
    print(f"whole run: {wall:.0f} s")
    harness.print_json({"bench": "alert_bench", "incidents": INCIDENTS,
                        "deliveries": DELIVERIES, "latency": lat_rows, "rate": rate,
                        "wall_s": wall, "target_p95_ms": 1000 * TARGET_P95_S})
    return 0


def flush_redis(url: str) -> None:
    import redis

    with redis.Redis.from_url(url) as conn:
        conn.flushdb()


if __name__ == "__main__":
    sys.exit(main())

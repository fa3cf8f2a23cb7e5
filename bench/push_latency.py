"""Delay from a committed cluster update to its arrival in each of 50 websocket clients.

Target: p95 under 100 ms. The topology is the production one: Postgres, the Redis channel
layer, uvicorn serving dashboard.asgi in its own process. This process plays the Celery
worker: it calls dashboard.cluster.state.ingest_nodes, which commits and then publishes
(dashboard/core/push.py). A second process holds the 50 clients, so that they do not share
a GIL with the publisher; on a small machine they still share its cores with everything
else, and the figures include that. Prints figures; the exit status says only whether the
benchmark itself worked.

    python bench/push_latency.py
    python bench/push_latency.py --smoke   # 3 clients, 5 rounds: does it still run?
    # overrides: BENCH_DATABASE_URL, BENCH_REDIS_URL, BENCH_CLIENTS, BENCH_NODES,
    #            BENCH_ROUNDS, BENCH_RATE_HZ
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from typing import IO, Any

import harness

from collectors.localray import free_port
from collectors.records import NodeRecord, ResourceUse

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"  # a db index of its own; flushed by this bench
TARGET_P95_MS = 100.0
# How long stragglers may take after the last round before they count as lost.
GRACE_S = harness.sized(3.0, 1.0)
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Plan:
    clients: int
    nodes: int
    rounds: int
    rate_hz: float

    @classmethod
    def from_env(cls) -> Plan:
        env = os.environ.get
        return cls(
            clients=int(env("BENCH_CLIENTS", harness.sized("50", "3"))),
            nodes=int(env("BENCH_NODES", harness.sized("64", "4"))),
            rounds=int(env("BENCH_ROUNDS", harness.sized("200", "5"))),
            rate_hz=float(env("BENCH_RATE_HZ", harness.sized("2.5", "5"))),
        )


# --- the clients (a process of their own) ------------------------------------------------
def run_clients(url: str, headers: dict[str, str], count: int, conn: Connection) -> None:
    """Entry point of the client process: report readiness, then every arrival."""
    try:
        arrivals = asyncio.run(_clients(url, headers, count, conn))
    except Exception as exc:  # any failure goes back to the parent, as text
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    conn.send(("arrivals", arrivals, usage.ru_utime + usage.ru_stime))


async def _clients(
    url: str, headers: dict[str, str], count: int, conn: Connection
) -> list[tuple[int, int, float]]:
    from websockets.asyncio.client import connect

    arrivals: list[tuple[int, int, float]] = []
    sockets = [await connect(url, additional_headers=headers, open_timeout=30, max_size=None)
               for _ in range(count)]
    await asyncio.wait_for(
        asyncio.gather(*(_await_snapshots(ws) for ws in sockets)), READY_TIMEOUT_S
    )
    readers = [asyncio.create_task(_read(i, ws, arrivals)) for i, ws in enumerate(sockets)]
    conn.send(("ready",))
    await asyncio.to_thread(conn.recv)  # the parent says "stop"
    for ws in sockets:
        await ws.close()
    await asyncio.gather(*readers, return_exceptions=True)
    return arrivals


async def _await_snapshots(ws: Any) -> None:
    """A client is in the groups once it has the snapshots (groups are joined first)."""
    seen: set[str] = set()
    while not {"health", "cluster"} <= seen:
        message = json.loads(await ws.recv())
        if message.get("snapshot"):
            seen.add(message["topic"])


async def _read(client: int, ws: Any, arrivals: list[tuple[int, int, float]]) -> None:
    from websockets.exceptions import ConnectionClosed

    try:
        async for raw in ws:
            arrived = time.time()  # before parsing: the client's own JSON work is not the push's
            message = json.loads(raw)
            if message["topic"] == "cluster":
                arrivals.append((client, int(message["data"]["nodes"][0]["cpu_percent"]), arrived))
    except ConnectionClosed:
        pass


# --- the publisher (this process, as the Celery worker would) ----------------------------
def node_records(nodes: int, seq: int) -> list[NodeRecord]:
    """A cluster whose every node reports cpu_percent = seq, so each round is a change."""
    started = datetime(2026, 1, 1, tzinfo=UTC)
    gib = 2**30
    return [
        NodeRecord(
            node_id=f"{n:056x}", node_ip=f"10.0.{n // 250}.{n % 250 + 1}",
            hostname=f"gpu-{n:03d}", is_head=n == 0, state="ALIVE", state_message=None,
            started_at=started, ended_at=None,
            resources={
                "CPU": ResourceUse(total=96.0, used=float(seq % 96)),
                "GPU": ResourceUse(total=8.0, used=float(seq % 9)),
                "memory": ResourceUse(total=1600.0 * gib, used=float(seq % 100) * gib),
                "object_store_memory": ResourceUse(total=200.0 * gib, used=float(seq % 50) * gib),
            },
            labels={"ray.io/node_id": f"{n:056x}", "ray.io/accelerator-type": "H100"},
            cpu_percent=float(seq), mem_total_bytes=2048 * gib, mem_used_bytes=(seq % 512) * gib,
            object_store_total_bytes=200 * gib, object_store_used_bytes=(seq % 50) * gib,
        )
        for n in range(nodes)
    ]


def publish_round(nodes: int, seq: int) -> tuple[float, float]:
    """Ingest one poll; return (commit time, time group_send returned), both time.time().

    ingest_nodes runs inside an outer transaction here, so that hooks registered around it
    bracket its own on_commit publish: hooks run in registration order, right after COMMIT.
    """
    from django.db import transaction
    from django.utils import timezone

    from dashboard.cluster.state import ingest_nodes

    stamps: dict[str, float] = {}
    with transaction.atomic():
        transaction.on_commit(lambda: stamps.setdefault("committed", time.time()))
        if not ingest_nodes(node_records(nodes, seq), timezone.now()):
            raise RuntimeError(f"round {seq}: ingest_nodes saw no change, so nothing is pushed")
        transaction.on_commit(lambda: stamps.setdefault("sent", time.time()))
    return stamps["committed"], stamps["sent"]


def publish_rounds(plan: Plan) -> tuple[dict[int, float], dict[int, float], float]:
    """Paced rounds; returns commit and sent times by sequence number, and rounds/s achieved.

    A round that cannot start on time starts as soon as the previous one is done.
    """
    committed: dict[int, float] = {}
    sent: dict[int, float] = {}
    start = time.monotonic()
    for seq in range(1, plan.rounds + 1):
        time.sleep(max(0.0, start + (seq - 1) / plan.rate_hz - time.monotonic()))
        committed[seq], sent[seq] = publish_round(plan.nodes, seq)
    return committed, sent, plan.rounds / (time.monotonic() - start)


# --- set-up and tear-down ----------------------------------------------------------------
def prepare_database(plan: Plan) -> str:
    """Fresh nodes (seq 0) and a viewer; returns the viewer's session cookie."""
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from dashboard.cluster.models import Node
    from dashboard.core.roles import VIEWER

    Node.objects.all().delete()
    publish_round(plan.nodes, 0)
    user, _ = User.objects.get_or_create(username="bench-viewer")
    user.set_unusable_password()
    user.save()
    user.groups.add(Group.objects.get(name=VIEWER))
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def flush_redis(url: str) -> None:
    import redis

    with redis.Redis.from_url(url) as conn:
        conn.flushdb()  # stale group members from an earlier run would receive pushes too


@contextmanager
def asgi_server(env: dict[str, str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "dashboard.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--lifespan", "off"],
        cwd=harness.REPO, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        _wait_until_serving(server, port, log)
        yield server
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _wait_until_serving(server: subprocess.Popen[bytes], port: int, log: IO[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"uvicorn exited with {server.returncode}:\n{log.read().decode()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("uvicorn did not answer /login/ within 60 s")


@contextmanager
def client_process(url: str, headers: dict[str, str], count: int) -> Iterator[Connection]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=run_clients, args=(url, headers, count, child), daemon=True)
    process.start()
    try:
        yield parent
    finally:
        process.join(timeout=15)
        if process.is_alive():
            process.terminate()
            process.join()
        parent.close()


def expect(conn: Connection, kind: str, timeout: float) -> tuple[Any, ...]:
    if not conn.poll(timeout):
        raise RuntimeError(f"the client process sent no {kind!r} within {timeout:.0f} s")
    message = conn.recv()
    if message[0] != kind:
        raise RuntimeError(f"client process: {message[1] if message[0] == 'error' else message}")
    return tuple(message)


# --- figures -----------------------------------------------------------------------------
def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def spread(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(values, 50), "p95_ms": percentile(values, 95),
        "p99_ms": percentile(values, 99), "max_ms": max(values), "n": len(values),
    }


def summarise(
    plan: Plan,
    committed: dict[int, float],
    sent: dict[int, float],
    arrivals: list[tuple[int, int, float]],
) -> dict[str, Any]:
    firsts: dict[tuple[int, int], float] = {}
    for client, seq, at in arrivals:
        if seq in committed:
            firsts.setdefault((client, seq), at)
    if not firsts:
        raise RuntimeError("no pushed update reached any client")
    by_round: dict[int, list[float]] = {}
    for (_, seq), at in firsts.items():
        by_round.setdefault(seq, []).append(1000 * (at - committed[seq]))
    latencies = [ms for values in by_round.values() for ms in values]
    expected = plan.rounds * plan.clients
    return {
        "commit_to_client": spread(latencies),
        "commit_to_first_client": spread([min(v) for v in by_round.values()]),
        "commit_to_last_client": spread([max(v) for v in by_round.values()]),
        "commit_to_group_send_returned": spread(
            [1000 * (sent[s] - committed[s]) for s in committed]
        ),
        "expected": expected,
        "lost": expected - len(firsts),
        "duplicates": sum(1 for _, seq, _ in arrivals if seq in committed) - len(firsts),
    }


def report(plan: Plan, figures: dict[str, Any]) -> None:
    rows = [
        [label, figures[key]["n"], f"{figures[key]['p50_ms']:.1f}",
         f"{figures[key]['p95_ms']:.1f}", f"{figures[key]['p99_ms']:.1f}",
         f"{figures[key]['max_ms']:.1f}"]
        for key, label in (
            ("commit_to_client", "commit -> client (all pairs)"),
            ("commit_to_first_client", "commit -> first client of round"),
            ("commit_to_last_client", "commit -> last client of round"),
            ("commit_to_group_send_returned", "commit -> group_send returned"),
        )
    ]
    harness.print_table(
        f"Live push latency: {plan.clients} clients, {plan.rounds} rounds at "
        f"{plan.rate_hz:g}/s, {plan.nodes} nodes per update "
        f"(~{figures['payload_bytes'] / 1024:.0f} KiB of JSON)",
        ["measure", "n", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows,
    )
    cpu = figures["cpu_s"]
    print(f"\nlost {figures['lost']} of {figures['expected']} (round, client) pairs; "
          f"duplicates {figures['duplicates']}; rounds published at "
          f"{figures['achieved_rate_hz']:.1f}/s (planned {plan.rate_hz:g}/s)")
    print(f"CPU seconds during the rounds ({figures['wall_s']:.1f} s wall, 2 cores here): "
          f"server {cpu['server']:.1f}, clients {cpu['clients']:.1f}, "
          f"publisher {cpu['publisher']:.1f}")
    met = figures["meets_target"]
    print(f"target p95 < {TARGET_P95_MS:.0f} ms: {'met' if met else 'NOT met'} "
          f"(p95 {figures['commit_to_client']['p95_ms']:.1f} ms)\n")


def payload_bytes() -> int:
    from dashboard.cluster.views_data import cluster_payload

    return len(json.dumps({"topic": "cluster", "data": cluster_payload()}))


def cpu_seconds(pid: int | None = None) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


# --- the run -----------------------------------------------------------------------------
def measure(plan: Plan, env: dict[str, str], cookie: str) -> dict[str, Any]:
    port = free_port()
    url = f"ws://127.0.0.1:{port}/ws/cluster/"
    headers = {"Origin": f"http://127.0.0.1:{port}", "Cookie": f"sessionid={cookie}"}
    with ExitStack() as stack:
        server = stack.enter_context(asgi_server(env, port))
        conn = stack.enter_context(client_process(url, headers, plan.clients))
        expect(conn, "ready", READY_TIMEOUT_S + 30)
        print(f"{plan.clients} clients connected; publishing {plan.rounds} rounds …", flush=True)
        cpu_before = (cpu_seconds(server.pid), cpu_seconds())
        wall = time.monotonic()
        committed, sent, achieved_hz = publish_rounds(plan)
        time.sleep(GRACE_S)
        wall = time.monotonic() - wall
        cpu_server, cpu_publisher = (a - b for a, b in zip(
            (cpu_seconds(server.pid), cpu_seconds()), cpu_before, strict=True))
        conn.send("stop")
        _, arrivals, cpu_clients = expect(conn, "arrivals", 60)
    figures = summarise(plan, committed, sent, arrivals)
    figures.update(
        achieved_rate_hz=achieved_hz, wall_s=wall, payload_bytes=payload_bytes(),
        # The clients' figure covers their whole life, connecting included.
        cpu_s={"server": cpu_server, "publisher": cpu_publisher, "clients": cpu_clients},
    )
    return figures


def main() -> int:
    plan = Plan.from_env()
    redis_url = os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    env = harness.setup_django(REDIS_URL=redis_url, RAYWATCH_ALLOWED_HOSTS="127.0.0.1,localhost")
    print(f"bench database: {env['DATABASE_URL']}; channel layer: {redis_url}")
    flush_redis(redis_url)
    try:
        figures = measure(plan, env, prepare_database(plan))
    finally:
        flush_redis(redis_url)
    figures.update(bench="push_latency", target_p95_ms=TARGET_P95_MS,
                   meets_target=figures["commit_to_client"]["p95_ms"] < TARGET_P95_MS,
                   **{f"plan_{k}": v for k, v in vars(plan).items()})
    report(plan, figures)
    harness.print_json(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""4,096 GPUs at 1 Hz through raywatch's real HTTP path (issue 16, goal 4): 512 node
agents' reports, as the agents encode them, POSTed to `manage.py serve` (the
production web process: uvicorn, Django, Postgres, Redis), with rollups and retention
running.

gpu_fleet_bench.py calls `ingest_gpu_polls` directly; this bench adds what it leaves
out: the request (HTTP, token authentication, gzip and JSON decoding, the report's
checks and its exactly-once seq bookkeeping, one transaction a report). Each of 512
nodes (8 H100s, 1-2 processes a GPU: gpu_bench.py's `agent_poll`) has a token of its
own and a report body made as the agent makes it (`wire.encode_gpu_poll` /
`encode_processes` records, `wire.encode_batch` batches of one poll each, a process
snapshot every 5 s, `wire.encode_report`, gzip by `client.encode_body`), encoded before
the clock starts. A cheap asyncio client (keep-alive connections, one a node) sends
them:

- *5 polls a report, paced*: each node every 5 s, the nodes spread over the 5 s: ~102
  reports a second. What agents do by default at 512 nodes: the server's answers ask
  for a report every 5.2 s (`send_s`, 512 agents / RAYWATCH_AGENT_REPORTS_PER_S=100;
  the most frequent advice of each way is printed);
- *5 polls a report, flat out*: each node sends its next report as soon as the last is
  answered: what the server sustains (the headroom);
- *1 poll a report, paced*: each node every second, as agents pinned to
  RAYWATCH_AGENT_SEND_S=0 send whatever they are asked: 512 reports a second.

Answers of 429/503 are retried after Retry-After, as the agent does. `roll_up` and
`prune` run every 10 s in a thread of this process. The figures: samples stored (rows
counted in the database, checked against the samples of the reports answered 200),
samples a second stored, report latency p50 / p95, the answers that were not 200,
the CPU a second of the server (its process tree) and of Postgres (the backends of
this run's database), and the connections the server opened. Baseline in the same
run: gpu_fleet_bench.py's direct calls (`one_way`) on the same database.

    python bench/gpu_reports_bench.py
    python bench/gpu_reports_bench.py --smoke   # 8 nodes, 5 s a way
    # overrides: BENCH_DATABASE_URL, BENCH_REDIS_URL, BENCH_NODES, BENCH_SECONDS,
    #            BENCH_PY_SPY=DIR (the server's stacks a way, sampled by py-spy)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import gpu_bench
import gpu_fleet_bench
import harness
import psutil

from collectors.agent import AGENT_VERSION, wire
from collectors.agent.client import encode_body
from collectors.agent.main import GZIP_OVER_BYTES
from collectors.localray import free_port
from collectors.records import ProcessFact

NODES = gpu_fleet_bench.NODES
SECONDS = int(os.environ.get("BENCH_SECONDS", harness.sized("20", "5")))
GPUS = gpu_bench.GPUS_PER_AGENT
GATHER = gpu_fleet_bench.GATHER
PROCESSES_EVERY_S = 5  # the agent's RAYWATCH_AGENT_PROCESSES_S default
WORKERS_A_NODE = 12  # Ray workers in a process snapshot
FLAT_OUT_REPORTS = 3  # flat out: bodies encoded per node, as many times the paced ones
LATE_S = 15.0  # a paced node gives up what it could not send this long after the run
RETENTION_EVERY_S = gpu_fleet_bench.RETENTION_EVERY_S
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/10"
REPORT_PATH = "/api/agent/v1/report"


@dataclass
class Report:
    request: bytes  # the whole HTTP request, headers and gzipped body
    samples: int


@dataclass
class Outcome:
    latencies: list[float] = field(default_factory=list)
    answers: Counter[int] = field(default_factory=Counter)
    acknowledged: int = 0  # samples in reports answered 200
    unsent: int = 0  # reports a paced node was too late to send
    reconnects: int = 0
    advice: Counter[float] = field(default_factory=Counter)  # send_s of the 200 answers


# --- the reports, as the agent encodes them ----------------------------------------------
def issue_tokens() -> list[str]:
    from django.utils import timezone

    from dashboard.agents import tokens

    logging.getLogger("raywatch.agents").setLevel(logging.ERROR)  # 512 "token issued"
    now = timezone.now()
    return [tokens.issue(gpu_bench.node_name(n), None, now, gpu_bench.node_ip(n))[1]
            for n in range(NODES)]


def snapshot(node: int, at: datetime) -> tuple[ProcessFact, ...]:
    return tuple(ProcessFact(pid=300_000 + 100 * node + w, create_time=at.timestamp() - 3600,
                             ppid=1, title=f"ray::Trainable.train_{w}", state="R",
                             cpu_percent=97.5, rss_bytes=(4 + w) << 30, threads=40)
                 for w in range(WORKERS_A_NODE))


def batch(node: int, stream: str, seq: int, at: datetime, rng: random.Random) -> bytes:
    """One poll's batch, as the agent's collect loop spools it."""
    records = [wire.encode_gpu_poll(gpu_bench.agent_poll(node, rng, at), at)]
    if int(at.timestamp()) % PROCESSES_EVERY_S == 0:
        records.append(wire.encode_processes(snapshot(node, at), at))
    encoded = [json.dumps(r, separators=(",", ":")) for r in records]
    return wire.encode_batch(stream, seq, wire.timestamp(at), encoded)


def http_request(host: str, token: str, body: bytes) -> bytes:
    data, content = encode_body(body, GZIP_OVER_BYTES)
    headers = {"Host": host, "Authorization": f"Bearer {token}", "Accept": "application/json",
               "User-Agent": f"raywatch-agent/{AGENT_VERSION}", **content,
               "Content-Length": str(len(data))}
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST {REPORT_PATH} HTTP/1.1\r\n{head}\r\n".encode() + data


class Node:
    """One node's agent: its token, its spool's stream and next seq."""

    def __init__(self, index: int, token: str) -> None:
        self.index, self.token = index, token
        self.stream = f"bench-{index:04d}-{os.getpid()}"
        self.seq = 1
        self.agent = {"version": AGENT_VERSION, "node": gpu_bench.node_name(index),
                      "node_ip": gpu_bench.node_ip(index),
                      "hostname": gpu_bench.node_name(index),
                      "spool": {"batches": GATHER, "bytes": 0, "dropped": 0, "rejected": 0}}

    def reports(self, host: str, count: int, polls: int, first: datetime,
                rng: random.Random) -> list[Report]:
        out = []
        for k in range(count):
            batches = []
            for j in range(polls):
                batches.append(batch(self.index, self.stream, self.seq,
                                     first + timedelta(seconds=k * polls + j), rng))
                self.seq += 1
            body = wire.encode_report(batches, self.agent)
            out.append(Report(http_request(host, self.token, body), polls * GPUS))
        return out


# --- the client ---------------------------------------------------------------------------
async def answer_of(reader: asyncio.StreamReader
                    ) -> tuple[int, float | None, dict[str, Any]]:
    """The status, Retry-After and JSON body of one HTTP/1.1 answer."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
    body = await reader.readexactly(int(fields.get("content-length", "0")))
    retry = fields.get("retry-after")
    return status, float(retry) if retry else None, json.loads(body) if body else {}


class Sender:
    """One node's keep-alive connection: a report sent until answered, after each
    429/503 again once Retry-After has passed, as the agent does."""

    def __init__(self, port: int, outcome: Outcome) -> None:
        self.port, self.outcome = port, outcome
        self.connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def send(self, report: Report, stop_at: float) -> bool:
        """False when `stop_at` passed before the report was answered."""
        while time.monotonic() <= stop_at:
            self.connection = self.connection or await asyncio.open_connection(
                "127.0.0.1", self.port)
            began = time.perf_counter()
            try:
                self.connection[1].write(report.request)
                status, retry, body = await answer_of(self.connection[0])
            except (ConnectionError, asyncio.IncompleteReadError):  # keep-alive timed out
                self.close()
                self.outcome.reconnects += 1
                continue
            self.outcome.latencies.append(time.perf_counter() - began)
            self.outcome.answers[status] += 1
            if status not in (429, 503):
                if status == 200:
                    self.outcome.acknowledged += report.samples
                    self.outcome.advice[body.get("send_s")] += 1
                return True
            await asyncio.sleep(retry if retry is not None else 1.0)
        return False

    def close(self) -> None:
        if self.connection is not None:
            self.connection[1].close()
            self.connection = None


async def send_all(port: int, reports: list[Report], due: list[float], paced: bool,
                   stop_at: float, outcome: Outcome) -> None:
    """One node: its reports in order, none before its due time, none started after
    `stop_at` (a paced node counts those it could not send)."""
    sender = Sender(port, outcome)
    for k, report in enumerate(reports):
        await asyncio.sleep(max(0.0, due[k] - time.monotonic()))
        if not await sender.send(report, stop_at):
            outcome.unsent += len(reports) - k if paced else 0
            break
    sender.close()


async def drive(port: int, reports: list[list[Report]], period: float | None,
                seconds: float) -> tuple[Outcome, float]:
    """All nodes at once from half a second on: paced (each node every `period` s, the
    nodes spread over it) or flat out (each report once the last is answered) for
    `seconds`. The outcome and the wall time from the start to the last answer."""
    outcome = Outcome()
    began = time.monotonic() + 0.5
    paced = period is not None
    stop_at = began + seconds + (LATE_S if paced else 0.0)
    jobs = []
    for n, node_reports in enumerate(reports):
        due = [began + (period or 0.0) * (k + n / len(reports)) if paced or k == 0 else 0.0
               for k in range(len(node_reports))]
        jobs.append(send_all(port, node_reports, due, paced, stop_at, outcome))
    await asyncio.gather(*jobs)
    return outcome, time.monotonic() - began


# --- what it costs --------------------------------------------------------------------------
class Meter(threading.Thread):
    """CPU of the server's process tree and of this database's Postgres backends
    (sampled every half second: a backend that lives less is partly missed), and
    roll_up + prune every RETENTION_EVERY_S, until stopped."""

    def __init__(self, server: psutil.Process, database: str) -> None:
        super().__init__(daemon=True)
        self.server, self.database = server, database
        self.stopping = threading.Event()
        self.backends: dict[int, float] = {}
        self.base = self.backends_cpu()
        self.backends.update(self.base)
        self.server_base = harness.tree_cpu_seconds(server)
        self.retention_runs = 0

    def backends_cpu(self) -> dict[int, float]:
        found = {}
        for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
            cmdline = " ".join(proc.info["cmdline"] or ())
            if proc.info["name"] == "postgres" and f" {self.database} " in f"{cmdline} ":
                found[proc.pid] = proc.info["cpu_times"].user + proc.info["cpu_times"].system
        return found

    def run(self) -> None:
        from django.db import connection
        from django.utils import timezone

        from dashboard.gpus.retention import prune, roll_up

        next_retention = time.monotonic() + RETENTION_EVERY_S
        try:
            while not self.stopping.wait(0.5):
                self.backends.update(self.backends_cpu())
                if time.monotonic() >= next_retention:
                    roll_up(timezone.now())
                    prune(timezone.now())
                    self.retention_runs += 1
                    next_retention += RETENTION_EVERY_S
        finally:
            connection.close()

    def stop(self) -> dict[str, float]:
        self.stopping.set()
        self.join(60)
        self.backends.update(self.backends_cpu())
        postgres = sum(cpu - self.base.get(pid, 0.0) for pid, cpu in self.backends.items())
        return {"server_cpu_s": harness.tree_cpu_seconds(self.server) - self.server_base,
                "postgres_cpu_s": postgres}


@contextmanager
def profiled(server: psutil.Process, name: str) -> Iterator[None]:
    """With BENCH_PY_SPY=DIR: py-spy samples the server while the block runs, its
    collapsed stacks in DIR/<way>.txt (py-spy: `pip install py-spy`)."""
    folder = os.environ.get("BENCH_PY_SPY")
    if not folder:
        yield
        return
    out = Path(folder) / f"{name.replace(' ', '-').replace(',', '')}.txt"
    beside = Path(sys.executable).parent / "py-spy"  # in the venv, or on PATH
    spy = subprocess.Popen([str(beside) if beside.exists() else "py-spy", "record",
                            "--pid", str(server.pid), "--rate", "50", "--nonblocking", "--gil",
                            "--format", "raw", "--output", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)


def sessions(database: str) -> int:
    return int(gpu_bench.sql("SELECT sessions FROM pg_stat_database WHERE datname = %s",
                             [database])[0][0])


def samples_stored() -> int:
    return int(gpu_bench.sql("SELECT count(*) FROM gpus_gpusample")[0][0])


def http_way(name: str, port: int, server: psutil.Process, database: str,
             reports: list[list[Report]], period: float | None) -> dict[str, Any]:
    from django.db import connection

    before, sessions_before = samples_stored(), sessions(database)
    connection.close()  # the bench's own connection is not counted as the server's
    meter = Meter(server, database)
    meter.start()
    cpu0 = gpu_bench.cpu_seconds()
    with profiled(server, name):
        outcome, wall = asyncio.run(drive(port, reports, period, SECONDS))
    client_cpu = gpu_bench.cpu_seconds() - cpu0
    cpu = meter.stop()
    stored = samples_stored() - before
    latencies = sorted(outcome.latencies) or [0.0]
    p95 = statistics.quantiles(latencies, n=20)[18] if len(latencies) > 1 else latencies[0]
    return {"way": name, "reports": sum(outcome.answers.values()),
            "answers": {str(k): v for k, v in sorted(outcome.answers.items())},
            "unsent": outcome.unsent, "reconnects": outcome.reconnects,
            "samples_stored": stored, "samples_acknowledged": outcome.acknowledged,
            "wall_s": wall, "samples_per_s": stored / wall,
            "latency_s": {"p50": statistics.median(latencies), "p95": p95,
                          "max": latencies[-1]},
            "server_cpu_s_per_s": cpu["server_cpu_s"] / wall,
            "postgres_cpu_s_per_s": cpu["postgres_cpu_s"] / wall,
            "client_cpu_s_per_s": client_cpu / wall,
            "connections_opened": sessions(database) - sessions_before,
            "retention_runs": meter.retention_runs,
            "advice_s": outcome.advice.most_common(1)[0][0] if outcome.advice else None}


def direct_way(mode: str, rng: random.Random, seconds: int) -> dict[str, Any]:
    """gpu_fleet_bench's direct calls of the same polls (no HTTP): the baseline. Its
    samples a second are what the p50 second's writes sustain; its latency, a call's."""
    r = gpu_fleet_bench.one_way(mode, rng, seconds)
    call_s = r["tick_s"]["p50"] * seconds / max(1, r["calls"])
    return {"way": f"direct call, {mode}", "reports": r["calls"], "answers": {},
            "unsent": 0, "reconnects": 0, "samples_stored": r["samples"],
            "samples_acknowledged": r["samples"], "wall_s": None,
            "samples_per_s": r["sustainable_samples_per_s"],
            "latency_s": {"p50": call_s, "p95": None, "max": None},
            "server_cpu_s_per_s": r["cpu_s_per_s"],
            "postgres_cpu_s_per_s": r["postgres_cpu_s_per_s"], "client_cpu_s_per_s": None,
            "connections_opened": None, "retention_runs": None}


def server_process() -> psutil.Process:
    """The `manage.py serve` that harness.served started (a child of this process)."""
    for child in psutil.Process().children():
        if "serve" in child.cmdline():
            return child
    raise RuntimeError("no `manage.py serve` child process")


# Each HTTP way: its name, polls a report, seconds between a node's reports (None: flat
# out), reports encoded per node.
HTTP_WAYS = [
    (f"HTTP, {GATHER} polls a report, paced", GATHER, float(GATHER), SECONDS // GATHER),
    (f"HTTP, {GATHER} polls a report, flat out", GATHER, None,
     FLAT_OUT_REPORTS * SECONDS // GATHER),
    ("HTTP, 1 poll a report, paced", 1, 1.0, SECONDS),
]


def http_ways(env: dict[str, str], tmp: Path, database: str, rng: random.Random
              ) -> list[dict[str, Any]]:
    from django.utils import timezone

    nodes = [Node(n, token) for n, token in enumerate(issue_tokens())]
    server_env = {**os.environ, **env, "RAY_ADDRESS": f"http://127.0.0.1:{free_port()}",
                  "RAYWATCH_GPU_SOURCE": "off", "RAYWATCH_DATA_DIR": str(tmp)}
    results = []
    with harness.served(server_env, tmp / "serve.log", "--no-celery") as base:
        port = int(base.rsplit(":", 1)[1])
        for name, polls, period, count in HTTP_WAYS:
            encoded = time.perf_counter()
            reports = [node.reports(f"127.0.0.1:{port}", count, polls, timezone.now(), rng)
                       for node in nodes]
            print(f"{name}: {sum(map(len, reports)):,} reports encoded in "
                  f"{time.perf_counter() - encoded:.0f} s", flush=True)
            results.append(http_way(name, port, server_process(), database, reports, period))
    return results


def main() -> int:
    redis_url = os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    with harness.throwaway_database("gpureports") as url, \
            tempfile.TemporaryDirectory(prefix="gpu-reports-bench-") as tmp:
        env = harness.setup_django(url, REDIS_URL=redis_url,
                                   RAYWATCH_CHANNEL_PREFIX=f"raywatch-gpu-reports-{os.getpid()}")
        from django.utils import timezone

        from dashboard.gpus.ingest import ingest_gpu_polls

        rng = random.Random(4096)
        now = timezone.now()  # the GPU and process rows exist before any way is timed
        ingest_gpu_polls([(gpu_bench.agent_poll(n, rng, now), gpu_bench.node_ip(n))
                          for n in range(NODES)], now)
        database = url.rsplit("/", 1)[1]
        http = http_ways(env, Path(tmp), database, rng)
        results = [direct_way(gpu_fleet_bench.GATHERED, rng, SECONDS), *http[:2],
                   direct_way("per node", rng, max(1, SECONDS // 4)), *http[2:]]
    print_figures(results)
    return 0


def print_figures(results: list[dict[str, Any]]) -> None:
    need = NODES * GPUS
    harness.print_table(
        f"{NODES} nodes x {GPUS} GPUs at 1 Hz ({need:,} samples/s needed) through "
        f"POST {REPORT_PATH} of `manage.py serve`, {SECONDS} s a way, roll_up + prune every "
        f"{RETENTION_EVERY_S} s; direct calls: gpu_fleet_bench.py",
        ["way", "reports", "not 200", "samples stored", "of acknowledged", "samples/s",
         "x needed", "latency p50 s", "p95 s", "CPU s/s server", "Postgres", "client",
         "connections", "send_s asked"],
        [[r["way"], r["reports"], _refused(r), r["samples_stored"],
          "yes" if r["samples_stored"] == r["samples_acknowledged"] else
          f"{r['samples_acknowledged']:,}", r["samples_per_s"],
          f"{r['samples_per_s'] / need:.2f}", r["latency_s"]["p50"],
          _or_dash(r["latency_s"]["p95"]), r["server_cpu_s_per_s"],
          r["postgres_cpu_s_per_s"], _or_dash(r["client_cpu_s_per_s"]),
          _or_dash(r["connections_opened"]), _or_dash(r.get("advice_s"))] for r in results])
    harness.print_json({"bench": "gpu_reports", "nodes": NODES, "gpus": need,
                        "seconds": SECONDS, "results": results})


def _refused(r: dict[str, Any]) -> str:
    shown = [f"{v:,} x {k}" for k, v in r["answers"].items() if k != "200"]
    if r["unsent"]:
        shown.append(f"{r['unsent']:,} unsent")
    return ", ".join(shown) or "-"


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value


if __name__ == "__main__":
    sys.exit(main())

"""One node agent's cost on a busy node: its CPU, its memory, and what it sends.

A real agent process (`python -m collectors.agent`, as `make agent` runs it) on a node of
8 GPUs (the fake pynvml of tests/fake_pynvml.py, the same NVML calls as a real driver)
and 50 Ray worker processes (python processes titled `ray::ImplicitFunc.train`, as Ray
renames its workers; each on one of the GPUs' process lists, as trials holding a GPU
share are), reporting every second to a real raywatch (uvicorn serving dashboard.asgi
on a database of this run's own). Between the two sits a small recording proxy in this
process: it counts the request bodies the agent sends, as sent (gzip, once raywatch's hello
offered it) and as JSON.

50 trial directories (Tune's layout and result lines, bench/trial_logs_bench.py's) get
one result.json line a second each under RAYWATCH_LOG_DIRS; an agent that ships trial
logs sends them too and the figures include them (the table says whether it did).

Measured over the window after a warm-up (the agent found every worker, its spool is
drained): the agent's CPU time (user + system, from /proc) per wall second as % of one
core, its RSS (sampled each second: max and last), report bytes per second on the wire
and as JSON. Goals
(issue 13): under 2 % of a core and under 100 MB. The exit status says only whether the
benchmark itself worked.

    .venv/bin/python bench/agent_bench.py            # 60 s window, about 1.5 minutes
    .venv/bin/python bench/agent_bench.py --smoke    # 8 s window
    BENCH_BASELINE=fb2d9d7 .venv/bin/python bench/agent_bench.py
        # and, in the same window, the agent of that git revision (a worktree of it) on a
        # node of its own, same load: the before and after of a change, measured together
    # overrides: BENCH_DATABASE_URL (its server), BENCH_WINDOW_S, BENCH_WORKERS (50),
    #            BENCH_GPUS (8), BENCH_TRIALS (50), BENCH_OTHER_PROCESSES (200: the rest of a
#            node's process table, which the agent scans for new workers every 5 s),
#            BENCH_PID_NAMESPACE=0 (run the node in this host's pid namespace),
#            BENCH_BASELINE (a git revision whose agent runs beside this one)
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import harness
from push_latency import asgi_server
from trial_logs_bench import Appender, trial_specs, write_tree

from collectors.localray import free_port

WINDOW_S = float(os.environ.get("BENCH_WINDOW_S", harness.sized("60", "8")))
WORKERS = int(os.environ.get("BENCH_WORKERS", "50"))
GPUS = int(os.environ.get("BENCH_GPUS", "8"))
TRIALS = int(os.environ.get("BENCH_TRIALS", "50"))
OTHER_PROCESSES = int(os.environ.get("BENCH_OTHER_PROCESSES", "200"))
BASELINE = os.environ.get("BENCH_BASELINE", "")
WARMUP_TIMEOUT_S = 60.0
GOAL_CPU_PERCENT, GOAL_RSS_MB = 2.0, 100.0
NODE = "bench-node"
REPORT_PATH = "/api/agent/v1/report"


# --- the node: fake Ray workers, fake GPUs, trial directories ------------------------------
# node.py, run inside the node's pid namespace (or this host's when none can be made):
# a "ray start" process whose "raylet" starts the Ray workers (a worker's parent chain is
# as long as on a node, for the GPU processes' owner join), and the other processes of a
# node; the raylet writes the GPUs' spec with the workers' pids as the node sees them,
# then the launcher becomes the agent. When the agent ends, the namespace (everything in
# it) ends; without one, the bench kills the process group.
NODE_SCRIPT = """
import json, os, subprocess, sys, time
role, workers, others, gpus, spec, name = sys.argv[1], *map(int, sys.argv[2:5]), *sys.argv[5:7]
code = "import time\\nwhile True:\\n    time.sleep(1)\\n"
if role == "ray-start":
    subprocess.run([sys.executable, __file__, "raylet", *sys.argv[2:]])
elif role == "raylet":
    ray = [subprocess.Popen(["bash", "-c", 'exec -a "ray::ImplicitFunc.train" "$0" -c "$1"',
                             sys.executable, code]) for _ in range(workers)]
    table = [{"uuid": f"GPU-{name}-{i}", "util": 60 + i, "mem_util": 30 + i,
              "mem_used": (20 + i) * 2**30, "temp": 60 + i, "power_mw": 250_000 + 1000 * i,
              "processes": [[w.pid, 2 * 2**30] for w in ray[i::gpus]]} for i in range(gpus)]
    with open(spec + ".tmp", "w") as out:
        json.dump({"gpus": table}, out)
    os.replace(spec + ".tmp", spec)
    ray[0].wait()
else:
    subprocess.Popen([sys.executable, __file__, "ray-start", *sys.argv[2:]])
    for _ in range(others):
        subprocess.Popen(["sleep", "100000"])
    while not os.path.exists(spec):
        time.sleep(0.1)
    os.execv(sys.executable, [sys.executable, "-m", "collectors.agent"])
"""


def own_pid_namespace() -> list[str]:
    """The command prefix that gives the node a pid namespace of its own (root), so the
    agent sees exactly the bench's processes, not the other Ray clusters of this machine;
    [] where that is not allowed."""
    probe = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
    if os.environ.get("BENCH_PID_NAMESPACE") == "0":
        return []
    try:
        ok = subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return [*probe[:-1], "--"] if ok else []


class TrialWriter:
    """TRIALS trial dirs, one result.json line a second each, from a thread."""

    def __init__(self, root: Path) -> None:
        self.specs = trial_specs(root, TRIALS, experiments=1)
        write_tree(self.specs, lines=5)
        self.appender = Appender(self.specs, lines=5)
        self.stop = threading.Event()
        self.lines = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        due = time.monotonic()
        while not self.stop.is_set():
            for n in range(len(self.specs)):
                self.appender.append(n)
            self.lines += len(self.specs)
            due += 1.0
            self.stop.wait(max(0.0, due - time.monotonic()))

    def __enter__(self) -> TrialWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


# --- the recording proxy -------------------------------------------------------------------
@dataclass
class Sent:
    at: float
    status: int
    body: bytes  # the report's JSON
    wire_bytes: int  # what went over the wire: the body as sent (gzip once hello offered it)


@dataclass
class Recorder:
    upstream: tuple[str, int]
    reports: list[Sent] = field(default_factory=list)
    other_requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def since(self, start: float, end: float) -> list[Sent]:
        with self.lock:
            return [s for s in self.reports if start <= s.at < end]


def proxy_handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            upstream = http.client.HTTPConnection(*recorder.upstream, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
            try:
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                reply = upstream.getresponse()
                answer = reply.read()
            except OSError:  # the server went away (the end of the run)
                self.close_connection = True
                return
            finally:
                upstream.close()
            with recorder.lock:
                if self.command == "POST" and self.path == REPORT_PATH:
                    gzipped = self.headers.get("Content-Encoding") == "gzip"
                    recorder.reports.append(Sent(time.monotonic(), reply.status,
                                                 gzip.decompress(body) if gzipped else body,
                                                 len(body)))
                else:
                    recorder.other_requests += 1
            self.send_response(reply.status)
            for name, value in reply.getheaders():
                if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            with suppress(OSError):  # the agent went away (the end of the run)
                self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Forward


@contextmanager
def recording_proxy(upstream_port: int) -> Iterator[tuple[int, Recorder]]:
    recorder = Recorder(("127.0.0.1", upstream_port))
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), proxy_handler(recorder))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], recorder
    finally:
        server.shutdown()
        server.server_close()


# --- the agent -----------------------------------------------------------------------------
@dataclass
class Node:
    agent_pid: int
    isolated: bool  # in a pid namespace of its own


@contextmanager
def node_with_agent(url: str, token: str, tmp: Path, log_root: Path, name: str,
                    source: Path = harness.REPO, ip: str = "10.9.0.8") -> Iterator[Node]:
    """The node's processes and `python -m collectors.agent` (from the checkout at
    `source`) with only what a node gives it; HOME and the Ray temp dir are empty
    directories, so it reads no real Tune directory of this machine."""
    home, ray_tmp, spec = tmp / "home", tmp / "ray-tmp", tmp / "gpus.json"
    tmp.mkdir(parents=True, exist_ok=True)
    home.mkdir()
    ray_tmp.mkdir()
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")
    env = {**{k: os.environ[k] for k in keep if k in os.environ},
           "HOME": str(home), "RAYWATCH_URL": url, "RAYWATCH_AGENT_TOKEN": token,
           "RAYWATCH_NODE_IP": ip, "RAYWATCH_NVML_MODULE": "tests.fake_pynvml",
           "FAKE_NVML_SPEC": str(spec), "RAYWATCH_AGENT_SPOOL": str(tmp / "spool"),
           "RAYWATCH_POLL_GPU_S": "1", "RAYWATCH_LOG_DIRS": str(log_root),
           "RAYWATCH_RAY_TMP_DIR": str(ray_tmp), "RAYWATCH_LOG_LEVEL": "WARNING"}
    prefix = own_pid_namespace()
    log = (tmp / "agent.log").open("wb")
    script = tmp / "node.py"
    script.write_text(NODE_SCRIPT)
    launcher = subprocess.Popen(
        [*prefix, sys.executable, str(script), "node", str(WORKERS), str(OTHER_PROCESSES),
         str(GPUS), str(spec), name],
        cwd=source, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        yield Node(find_agent(launcher), isolated=bool(prefix))
    finally:
        with suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGTERM)  # the agent, or all (no namespace)
        with suppress(subprocess.TimeoutExpired):
            launcher.wait(20)
        with suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
        log.close()


def find_agent(launcher: subprocess.Popen[bytes]) -> int:
    """The agent's pid as this host sees it, once the launcher has become the agent."""
    import psutil

    deadline = time.monotonic() + WARMUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if launcher.poll() is not None:
            raise SystemExit(f"the node's launcher exited with {launcher.returncode}")
        with suppress(psutil.Error):
            root = psutil.Process(launcher.pid)
            for process in [root, *root.children(recursive=True)]:
                if process.cmdline()[1:3] == ["-m", "collectors.agent"]:
                    return process.pid
        time.sleep(0.2)
    raise SystemExit("the agent did not start")


def cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def rss_mb(pid: int) -> float:
    import psutil

    return float(psutil.Process(pid).memory_info().rss) / 2**20


# --- what was sent -------------------------------------------------------------------------
def records_of(sent: list[Sent]) -> tuple[Counter[str], Counter[str], int, int]:
    """Records and their JSON bytes by kind, and the most GPUs and processes one record
    carried."""
    kinds: Counter[str] = Counter()
    size: Counter[str] = Counter()
    gpus = processes = 0
    for report in sent:
        for batch in json.loads(report.body)["batches"]:
            for record in batch["records"]:
                kinds[record["kind"]] += 1
                size[record["kind"]] += len(json.dumps(record, separators=(",", ":")))
                gpus = max(gpus, len(record.get("gpus") or ()))
                processes = max(processes, len(record.get("processes") or ()))
    return kinds, size, gpus, processes


def warmed_up(recorder: Recorder, workers: int) -> bool:
    """The agent reports every worker, and its last reports were all stored at once."""
    recent = recorder.since(time.monotonic() - 3, time.monotonic())
    if len(recent) < 2 or any(s.status != 200 for s in recent):
        return False
    return records_of(recent[-1:])[3] >= workers


def wait_warm(recorder: Recorder, node: Node, log: Path) -> None:
    import psutil

    deadline = time.monotonic() + WARMUP_TIMEOUT_S
    while not warmed_up(recorder, WORKERS):
        if not psutil.pid_exists(node.agent_pid) or time.monotonic() > deadline:
            statuses = Counter(s.status for s in recorder.reports)
            raise SystemExit(f"the agent did not settle (report answers {dict(statuses)}):"
                             f"\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


@dataclass
class Run:
    """One agent under test: which code, its node, what it sent, who writes its trials."""

    label: str
    node: Node
    recorder: Recorder
    writer: TrialWriter
    rss: list[float] = field(default_factory=list)


def measure(runs: list[Run]) -> list[dict[str, Any]]:
    """Every agent over the same window: the same machine load for each."""
    lines0 = [run.writer.lines for run in runs]
    start, cpu0 = time.monotonic(), [cpu_seconds(run.node.agent_pid) for run in runs]
    while time.monotonic() - start < WINDOW_S:
        for run in runs:
            run.rss.append(rss_mb(run.node.agent_pid))
        time.sleep(1.0)
    end, cpu1 = time.monotonic(), [cpu_seconds(run.node.agent_pid) for run in runs]
    return [{**figures_of(run, start, end, cpu1[i] - cpu0[i]),
             "trial_lines_per_s": round((run.writer.lines - lines0[i]) / (end - start), 1)}
            for i, run in enumerate(runs)]


def figures_of(run: Run, start: float, end: float, cpu_s: float) -> dict[str, Any]:
    rss, node = run.rss, run.node
    wall = end - start
    sent = run.recorder.since(start, end)
    raw = sum(len(s.body) for s in sent)
    wire = sum(s.wire_bytes for s in sent)
    kinds, size, gpus, processes = records_of(sent)
    return {
        "window_s": round(wall, 1),
        "agent": run.label,
        "agent_cpu_percent_of_a_core": round(100 * cpu_s / wall, 2),
        "agent_rss_mb_max": round(max(rss), 1), "agent_rss_mb_last": round(rss[-1], 1),
        "reports": len(sent), "reports_not_stored": sum(s.status != 200 for s in sent),
        "report_json_bytes_per_s": round(raw / wall), "report_body_median_bytes":
            round(statistics.median(len(s.body) for s in sent)) if sent else 0,
        "wire_ratio": round(wire / raw, 3) if raw else None,
        "wire_bytes_per_s": round(wire / wall),
        "reports_gzipped": sum(s.wire_bytes != len(s.body) for s in sent),
        "records_per_s": {k: round(v / wall, 2) for k, v in sorted(kinds.items())},
        "record_bytes_per_s": {k: round(v / wall) for k, v in sorted(size.items())},
        "gpus_per_poll": gpus, "processes_per_snapshot": processes,
        "trial_logs_shipped": kinds.get("trial_log", 0) > 0,
        "own_pid_namespace": node.isolated,
    }


def report(figures: dict[str, Any]) -> None:
    cpu, rss = figures["agent_cpu_percent_of_a_core"], figures["agent_rss_mb_max"]
    harness.print_table(
        f"Agent of {figures['agent']}: {figures['gpus_per_poll']} GPUs, "
        f"{figures['processes_per_snapshot']} processes watched, {TRIALS} trials writing "
        f"{figures['trial_lines_per_s']:.0f} lines/s; {figures['window_s']} s window",
        ["figure", "value", "goal", "met"],
        [["agent CPU, % of one core", cpu, f"< {GOAL_CPU_PERCENT:g}", cpu < GOAL_CPU_PERCENT],
         ["agent RSS max, MB", rss, f"< {GOAL_RSS_MB:g}", rss < GOAL_RSS_MB],
         ["agent RSS at the end, MB", figures["agent_rss_mb_last"], "", ""],
         ["report bodies on the wire, bytes/s", figures["wire_bytes_per_s"], "", ""],
         ["the same reports as JSON, bytes/s", figures["report_json_bytes_per_s"], "", ""],
         ["wire / JSON", figures["wire_ratio"], "", ""],
         ["reports (requests)", figures["reports"], "", ""],
         ["of which gzipped", figures["reports_gzipped"], "", ""],
         ["median report body, bytes", figures["report_body_median_bytes"], "", ""],
         ["trial logs shipped by the agent", figures["trial_logs_shipped"], "", ""]])
    print("records/s by kind: " + ", ".join(
        f"{k} {v} ({figures['record_bytes_per_s'][k]:,} bytes/s)"
        for k, v in figures["records_per_s"].items()))
    if not figures["trial_logs_shipped"]:
        print("(this agent does not ship trial logs: the figures are GPUs + processes)")
    if not figures["own_pid_namespace"]:
        print("(no pid namespace of its own (not root?): the agent also watched this "
              "machine's other Ray workers)")


def main() -> None:
    os.environ.pop("REDIS_URL", None)  # the server's channel layer: in-memory
    with ExitStack() as stack:
        database = stack.enter_context(harness.throwaway_database("agent"))
        env = harness.setup_django(database)
        from django.utils import timezone

        from dashboard.agents.tokens import issue

        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agent-bench-")))
        sources = [("this checkout", harness.REPO)]
        if BASELINE:
            sources.append((f"baseline {BASELINE}",
                            stack.enter_context(harness.worktree(BASELINE, tmp))))
        server_port = free_port()
        stack.enter_context(asgi_server(env, server_port))
        runs = []
        for i, (label, source) in enumerate(sources):
            name = f"{NODE}-{i}"
            token = issue(name, None, timezone.now())[1]
            proxy_port, recorder = stack.enter_context(recording_proxy(server_port))
            writer = stack.enter_context(TrialWriter(tmp / name / "ray_results"))
            node = stack.enter_context(node_with_agent(
                f"http://127.0.0.1:{proxy_port}", token, tmp / name, tmp / name / "ray_results",
                name, source, ip=f"10.9.0.{8 + i}"))
            runs.append(Run(label, node, recorder, writer))
        for i, run in enumerate(runs):
            wait_warm(run.recorder, run.node, tmp / f"{NODE}-{i}" / "agent.log")
        results = measure(runs)
    for figures in results:
        report(figures)
        figures.update(workers=WORKERS, other_processes=OTHER_PROCESSES, trials=TRIALS,
                       goal_cpu_percent=GOAL_CPU_PERCENT, goal_rss_mb=GOAL_RSS_MB)
    if len(results) > 1:
        print(f"CPU, this agent / the baseline's in the same window: "
              f"{results[0]['agent_cpu_percent_of_a_core']} / "
              f"{results[1]['agent_cpu_percent_of_a_core']} % of a core")
    harness.print_json(results[0] if len(results) == 1 else {"agents": results})


if __name__ == "__main__":
    main()

"""What one node agent costs and sends: 8 GPUs polled at 1 Hz plus 50 Tune trials each
writing a result line every second (issue 13's figures).

The agent is `python -m collectors.agent` as `make agent` runs it, with the fake pynvml
(tests/fake_pynvml.py, 8 GPUs: no driver here) and RAYWATCH_LOG_DIRS on a directory
where this script plays 50 trials: one line a trial a second, spread over the second,
shaped like a real Tune line (config, bookkeeping keys, four metrics). raywatch is a
stub here (it acknowledges every batch and counts what arrived): the agent's CPU and
bytes do not depend on what stores them, and a real server on the same two cores would
blur the agent's CPU figure. Figures: bytes/s the agent sent (bodies and request
headers; by record kind), the agent's CPU % of one core and RSS, and the time from a
line written to its arrival at raywatch (one trial-log poll plus a send). Prints
figures; the exit status says only whether the bench itself worked.

    .venv/bin/python bench/agent_trial_logs_bench.py          # 60 s measured (BENCH_SECONDS)
    .venv/bin/python bench/agent_trial_logs_bench.py --smoke  # 4 s: does it still run?
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import harness
import psutil

from tests.receivers import JsonHandler, serve
from tests.served import fake_gpu_spec

TRIALS, GPUS = int(os.environ.get("BENCH_TRIALS", "50")), 8
SECONDS = float(os.environ.get("BENCH_SECONDS", harness.sized("60", "4")))
WARMUP_S = harness.sized(5.0, 2.0)
STAMP = "2026-11-23_12-59-05"


class Received:
    """What the stub raywatch got: bytes by kind, and when each result line arrived."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counting = False
        self.bytes: Counter[str] = Counter()
        self.requests = 0
        self.arrived: dict[tuple[str, int], float] = {}

    def report(self, headers: int, body: bytes) -> list[int]:
        now = time.time()
        data = json.loads(body)
        with self.lock:
            for batch in data["batches"]:
                for record in batch["records"]:
                    if record["kind"] == "trial_log":
                        for result in record["results"]:
                            self.arrived.setdefault((record["trial_id"], result["iteration"]),
                                                    now)
                    if self.counting:
                        self.bytes[record["kind"]] += len(json.dumps(record,
                                                                     separators=(",", ":")))
            if self.counting:
                self.bytes["request (headers and body)"] += headers + len(body)
                self.requests += 1
        return [b["seq"] for b in data["batches"]]


def stub(received: Received) -> ThreadingHTTPServer:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path.endswith("/hello"):
                self.answer({"version": 1, "node": "bench-node", "node_ip": None})
            else:  # commands: none, after a while (the agent long-polls)
                time.sleep(5)
                self.answer({"version": 1, "commands": []})

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = len(self.requestline) + len(str(self.headers))
            self.answer({"version": 1, "stored": received.report(headers, body),
                         "duplicate": [], "skipped": {}})

    return serve(Handler)


def trial_line(n: int, iteration: int, now: float) -> str:
    """A line as Tune writes it for tests/tune_scripts/search.py's trainable."""
    tid = f"be0c5_{n:05d}"
    return json.dumps({
        "score": iteration * 0.5, "loss": 1.0 / iteration, "timing_s/gen": 0.1,
        "timing_s/reward": 0.2, "timestamp": int(now), "checkpoint_dir_name": None,
        "done": False, "training_iteration": iteration, "trial_id": tid, "date": STAMP,
        "time_this_iter_s": 1.0002, "time_total_s": float(iteration), "pid": 30000 + n,
        "hostname": "gpu-node-7", "node_ip": "10.0.0.7",
        "config": {"behaviour": "healthy", "lr": 0.5, "steps": 100000},
        "time_since_restore": float(iteration), "iterations_since_restore": iteration,
    }) + "\n"


def make_trials(root: Path) -> list[Path]:
    experiment = root / "bench_search"
    experiment.mkdir(parents=True)
    files = []
    for n in range(TRIALS):
        trial = experiment / f"trainable_be0c5_{n:05d}_{n}_lr=0.5000_{STAMP}"
        trial.mkdir()
        (trial / "params.json").write_text('{"behaviour": "healthy", "lr": 0.5}')
        (trial / "result.json").write_text("")
        files.append(trial / "result.json")
    states = [[json.dumps({"trial_id": f"be0c5_{n:05d}", "status": "RUNNING"}),
               json.dumps({"num_failures": 0, "last_result_time": None})] for n in range(TRIALS)]
    (experiment / f"experiment_state-{STAMP}.json").write_text(json.dumps({"trial_data": states}))
    return files


def write_lines(files: list[Path], stop: threading.Event, written: dict) -> None:
    """Each trial writes one line a second; the 50 writes are spread over the second."""
    iteration, start = 0, time.time()
    while not stop.is_set():
        iteration += 1
        for n, path in enumerate(files):
            due = start + iteration - 1 + n / len(files)
            stop.wait(max(0.0, due - time.time()))
            now = time.time()
            with path.open("a") as out:
                out.write(trial_line(n, iteration, now))
            written[(f"be0c5_{n:05d}", iteration)] = now


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="rw-agent-bench-"))
    received = Received()
    server = stub(received)
    files = make_trials(work / "logs")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update({
        "RAYWATCH_URL": f"http://127.0.0.1:{server.server_port}",
        "RAYWATCH_AGENT_TOKEN": "rwa_" + "b" * 43, "RAYWATCH_NODE_IP": "10.0.0.7",
        "RAYWATCH_NVML_MODULE": "tests.fake_pynvml",
        "FAKE_NVML_SPEC": fake_gpu_spec(work / "gpus.json", "bench", GPUS),
        "RAYWATCH_AGENT_SPOOL": str(work / "spool"), "RAYWATCH_LOG_DIRS": str(work / "logs"),
        "HOME": str(work / "home"), "RAYWATCH_RAY_TMP_DIR": str(work / "ray"),
        "RAYWATCH_POLL_GPU_S": "1", "RAYWATCH_POLL_LOGS_S": "1",
    })
    agent = subprocess.Popen([sys.executable, "-m", "collectors.agent"], cwd=harness.REPO,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stop, written = threading.Event(), {}
    writer = threading.Thread(target=write_lines, args=(files, stop, written), daemon=True)
    try:
        writer.start()
        time.sleep(WARMUP_S)
        process = psutil.Process(agent.pid)
        cpu0, t0 = process.cpu_times(), time.monotonic()
        with received.lock:
            received.counting = True
        time.sleep(SECONDS)
        with received.lock:
            received.counting = False
            sent = dict(received.bytes)
            requests = received.requests
        cpu1, t1 = process.cpu_times(), time.monotonic()
        rss = process.memory_info().rss
        stop.set()
        writer.join()
        time.sleep(2.5)  # the last lines' poll and send
    finally:
        agent.terminate()
        _, errors = agent.communicate(timeout=30)
        server.shutdown()
        server.server_close()
        shutil.rmtree(work, ignore_errors=True)
    if agent.returncode not in (0, -15):
        raise SystemExit(f"the agent failed:\n{errors.decode()[-3000:]}")
    if os.environ.get("BENCH_DEBUG"):
        print(errors.decode()[-3000:])
    figures = figures_of(sent, requests, t1 - t0, cpu0, cpu1, rss, written, received)
    harness.print_table(
        f"One agent, {GPUS} GPUs at 1 Hz and {TRIALS} trials reporting every second, "
        f"{t1 - t0:.0f} s measured",
        ["figure", "value"], [[k, v] for k, v in figures.items()])
    harness.print_json(figures)


def figures_of(sent: dict[str, int], requests: int, wall: float, cpu0: Any, cpu1: Any,
               rss: int, written: dict, received: Received) -> dict[str, float]:
    delays = sorted(received.arrived[k] - t for k, t in written.items()
                    if k in received.arrived)
    if (TRIALS and not delays) or not sent:
        raise SystemExit(f"no trial line arrived at the stub raywatch (sent {sent})")
    cpu = (cpu1.user - cpu0.user + cpu1.system - cpu0.system) / wall * 100
    return {
        "bytes_per_s": sent.get("request (headers and body)", 0) / wall,
        "trial_log_bytes_per_s": sent.get("trial_log", 0) / wall,
        "gpu_poll_bytes_per_s": sent.get("gpu_poll", 0) / wall,
        "processes_bytes_per_s": sent.get("processes", 0) / wall,
        "requests_per_s": requests / wall,
        "agent_cpu_percent": cpu,
        "agent_rss_mb": rss / 2**20,
        "line_to_raywatch_p50_s": statistics.median(delays) if delays else 0.0,
        "line_to_raywatch_p95_s": delays[max(0, int(len(delays) * 0.95) - 1)] if delays else 0.0,
        "lines_arrived": len(delays),
        "lines_written": len(written),
    }


if __name__ == "__main__":
    main()

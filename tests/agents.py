"""Helpers for the node agent tests: an agent process as `make agent` runs it (with the
fake pynvml: no GPU here), and reports written by hand, as a hostile node would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.agent import wire
from collectors.agent.client import Reply, call
from dashboard.agents.ingest import Sent
from tests.served import NOT_INHERITED, ROOT, fake_gpu_spec


def agent_env(url: str, token: str, tmp_path: Path, node: str, node_ip: str, gpus: int = 2,
              processes: list[tuple[int, int]] | None = None, **extra: str) -> dict[str, str]:
    """The environment of `make agent` on node `node`: raywatch's URL and the node's token,
    no database, no broker; a home and Ray temp dir of its own (empty), so it reads no
    trial logs of this host but those a test gives it (RAYWATCH_LOG_DIRS)."""
    spec = fake_gpu_spec(tmp_path / f"{node}-gpus.json", node, gpus)
    if processes:
        data = json.loads(Path(spec).read_text())
        data["gpus"][0]["processes"] = processes
        Path(spec).write_text(json.dumps(data))
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    return {**env, "RAYWATCH_URL": url, "RAYWATCH_AGENT_TOKEN": token,
            "RAYWATCH_NODE_IP": node_ip, "RAYWATCH_NVML_MODULE": "tests.fake_pynvml",
            "FAKE_NVML_SPEC": spec, "RAYWATCH_AGENT_SPOOL": str(tmp_path / f"{node}-spool"),
            "RAYWATCH_POLL_GPU_S": "1", "HOME": str(tmp_path / f"{node}-home"),
            # Tests shrink time (a stall after 6 s, not 120 s): process facts every poll,
            # not every 5 s, or a CPU % would still cover the steps before a hang.
            "RAYWATCH_AGENT_PROCESSES_S": "1",
            "RAYWATCH_RAY_TMP_DIR": str(tmp_path / f"{node}-home" / "ray"), **extra}


# The agent's main() with its clock moved (time_machine: wall clock only, as NTP's would
# be; monotonic time, /proc's start times and psutil are the node's own).
CLOCK_MOVED = """
import datetime, time_machine
moved = time_machine.travel(datetime.datetime.now(datetime.UTC)
                            + datetime.timedelta(seconds={ahead_s}), tick=True)
moved.start()
from collectors.agent.main import main
main()
"""


@contextmanager
def running_agent(env: dict[str, str], log: Path, clock_ahead_s: float = 0
                  ) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m collectors.agent`, stopped (SIGTERM) afterwards; its output in `log`.
    `clock_ahead_s`: the agent's clock that far ahead of this host's (behind: negative)."""
    command = ([sys.executable, "-c", CLOCK_MOVED.format(ahead_s=clock_ahead_s)]
               if clock_ahead_s else [sys.executable, "-m", "collectors.agent"])
    with log.open("ab") as out:
        agent = subprocess.Popen(command, cwd=ROOT, env=env,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield agent
    finally:
        stop_agent(agent)


def stop_agent(agent: subprocess.Popen[bytes]) -> None:
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(20)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()


def gpu_record(uuid: str, index: int = 0, **fields: Any) -> dict[str, Any]:
    return {"index": index, "uuid": uuid, "name": "NVIDIA A100", "utilization_gpu": 50.0,
            "processes": [], **fields}


def report(url: str, token: str, seq: int, gpus: list[dict[str, Any]], stream: str = "s1",
           agent: dict[str, Any] | None = None, **batch: Any) -> Reply:
    """POST report with one batch of one GPU poll, written by hand."""
    return call("POST", f"{url}/api/agent/v1/report", token,
                report_body(seq, gpus, stream, agent, **batch))


def report_body(seq: int, gpus: list[dict[str, Any]], stream: str = "s1",
                agent: dict[str, Any] | None = None, **batch: Any) -> dict[str, Any]:
    """A report of one batch of one GPU poll."""
    at = wire.timestamp(datetime.now(UTC))
    poll = {"kind": wire.GPU_POLL, "at": at, "error": None, "gpus": gpus, "problems": []}
    return {"version": wire.VERSION, "agent": agent or {"version": "test"},
            "batches": [{"stream": stream, "seq": seq, "at": at, "records": [poll], **batch}]}


def commands(url: str, token: str, wait: float = 0) -> Reply:
    return call("GET", f"{url}/api/agent/v1/commands?wait={wait:g}", token, timeout=wait + 10)


def sent(token: str, body: dict[str, Any]) -> Sent:
    """A report as its request carried it: JSON text, NaN and Infinity as Python writes
    them (bare NaN, Infinity: not JSON, but what json.loads takes)."""
    return Sent(f"Bearer {token}", "127.0.0.1", json.dumps(body).encode(), "identity")


def batches(*gpus: list[dict[str, Any]], processes: Any = None) -> dict[str, Any]:
    """One report, a batch per list of GPUs (seq 1, 2, ...)."""
    bodies = [report_body(seq, g) for seq, g in enumerate(gpus, start=1)]
    body = {**bodies[0], "batches": [b["batches"][0] for b in bodies]}
    if processes is not None:
        at = body["batches"][0]["at"]
        body["batches"][0]["records"].append({"kind": "processes", "at": at,
                                              "processes": processes})
    return body


def fact(pid: int) -> dict[str, Any]:
    return {"pid": pid, "create_time": 1.0, "ppid": 1, "title": "ray::Trainable.train",
            "state": "S", "cpu_percent": 1.0, "rss_bytes": 1, "threads": 1}

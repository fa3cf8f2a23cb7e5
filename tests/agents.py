"""Helpers for the node agent tests: an agent process as `make agent` runs it (with the
fake pynvml: no GPU here), one GPU poll of a node's agent reported in this process
(report_gpus), and reports written by hand, as a hostile node would."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from collectors.agent import AGENT_VERSION, wire
from collectors.agent.client import Reply, call
from collectors.hostinfo import host_name, node_ip_address
from collectors.http import SourceError
from collectors.nvml import NvmlSource, load_nvml_module
from collectors.procstat import ProcessWatcher, with_ancestors
from dashboard.agents import tokens
from dashboard.agents.ingest import Sent, ingest_sent
from dashboard.agents.models import NodeToken
from tests.served import NOT_INHERITED, ROOT, fake_gpu_spec

FAKE_NVML, SIMULATED_NVML = "tests.fake_pynvml", "collectors.simnvml"


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


@contextmanager
def node_agent(url: str, tmp_path: Path, *, node: str | None = None,
               node_ip: str = "127.0.0.1", pid: int | None = None, on_gpu: bool = False,
               memory: int = 1024**3, cluster: str = "") -> Iterator[Path]:
    """A real agent (`python -m collectors.agent`, its token issued as an admin would) of
    node `node`, by default raywatch's own host as `serve` starts one beside itself (its
    token's node is this host's name: Ray's name of the node, as hung_trial writes it), at
    `node_ip`. Entered once raywatch has heard from it and, with `pid`, stored its report
    of that process (a Ray worker it watches: the only way raywatch signals or looks at
    a process); `on_gpu`: its NVML lists `pid` on its GPU `GPU-<node>-0`, using `memory`;
    `cluster`: its token's (default: the one RAY_ADDRESS points at). Yields its log."""
    from dashboard.agents.models import NodeProcess
    from dashboard.gpus.models import GpuProcess
    from tests.conftest import wait_for

    node = node or host_name()
    _, token = tokens.issue(node, None, timezone.now(), node_ip,
                            **({"cluster": cluster} if cluster else {}))
    held = [(pid, memory)] if on_gpu and pid is not None else None
    env = agent_env(url, token, tmp_path, node, node_ip, gpus=1, processes=held)
    log = tmp_path / f"{node}-agent.log"

    def listed() -> bool:
        heard = NodeToken.objects.filter(node=node, last_seen_at__isnull=False).exists()
        return heard and (pid is None or NodeProcess.objects.filter(node=node, pid=pid)
                          .exclude(state="Z").exists()) and (
            not held or GpuProcess.objects.filter(pid=pid).exists())

    with running_agent(env, log):
        wait_for(listed, 60, 0.3,
                 f"the agent of {node} to report{f' pid {pid}' if pid else ''}",
                 explain=lambda: log.read_text()[-2000:])
        yield log


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


# --- one GPU poll of a node's agent, in this process -------------------------------------
@dataclass
class _NodeAgent:
    """What report_gpus keeps of one node's agent between its polls, as the agent
    process keeps it: its token, its spool's stream and last seq, its process watcher."""

    token: str
    stream: str = field(default_factory=lambda: f"tests-{secrets.token_hex(8)}")
    seq: int = 0
    watcher: ProcessWatcher = field(default_factory=ProcessWatcher)


_node_agents: dict[tuple[str, str, str], _NodeAgent] = {}


def report_gpus(node: str | None = None, cluster: str = "", node_ip: str | None = None,
                simulated: bool = False) -> dict[str, Any]:
    """One GPU poll of node `node`'s agent: collected as `python -m collectors.agent`
    collects it (NVML through tests.fake_pynvml, which the fake_gpus fixture drives, or the
    simulated GPUs; the processes' ancestors; a snapshot of the processes it watches),
    sent as a report of one batch, and stored as POST /api/agent/v1/report stores it
    (ingest_sent), under the node's token (issued once, as `manage.py agent_token` does).
    Default node: this host's, as the old in-process poll named it. raywatch's answer."""
    node = node or settings.NODE_NAME or host_name()
    node_ip = node_ip or settings.NODE_IP or node_ip_address()
    agent = _node_agent(node, node_ip, cluster)
    agent.seq += 1
    batch = wire.encode_batch(agent.stream, agent.seq, wire.timestamp(datetime.now(UTC)), [
        json.dumps(r, separators=(",", ":")) for r in _collect(node, agent.watcher, simulated)])
    said = {"version": AGENT_VERSION, "node": node, "node_ip": node_ip,
            "hostname": host_name(), "sent_at": wire.timestamp(datetime.now(UTC)),
            "problems": []}
    body = wire.encode_report([batch], said)
    [answer] = ingest_sent([Sent(f"Bearer {agent.token}", "127.0.0.1", body, "identity")],
                           timezone.now())
    if isinstance(answer, Exception):
        raise answer
    assert answer["stored"] == [agent.seq], answer
    return answer


def _node_agent(node: str, node_ip: str, cluster: str) -> _NodeAgent:
    """The node's agent of an earlier call while its token is still stored (a test's
    database is emptied after it), else one with a new token."""
    agent = _node_agents.get((node, node_ip, cluster))
    if agent is None or not NodeToken.objects.filter(
            token_hash=wire.token_key(agent.token)).exists():
        agent = _NodeAgent(tokens.issue(node, None, timezone.now(), node_ip, cluster)[1])
        _node_agents[(node, node_ip, cluster)] = agent
    return agent


def _collect(node: str, watcher: ProcessWatcher, simulated: bool) -> list[dict[str, Any]]:
    """The records of one poll, as collectors.agent.main.Agent.collect makes them, with
    a process snapshot each time (as the agent takes one at its first poll and at every
    poll after a signal)."""
    at = datetime.now(UTC)
    source = NvmlSource(load_nvml_module(SIMULATED_NVML if simulated else FAKE_NVML),
                        node=node, simulated=simulated)
    gpu_pids: list[int] = []
    try:
        poll = with_ancestors(source.poll(at))
        records = [wire.encode_gpu_poll(poll, at)]
        gpu_pids = [p.pid for g in poll.gpus for p in g.processes or ()]
    except SourceError as exc:
        records = [wire.encode_gpu_poll(None, at, exc.message)]
    return [*records, wire.encode_processes(watcher.read(gpu_pids), at)]

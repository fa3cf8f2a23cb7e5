"""A node agent reports its own node and takes its own node's commands, over HTTP with
a node token and nothing else (docs/agent-protocol.md): what a token can and cannot do,
against a real ASGI server."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from collectors.agent import wire
from collectors.agent.client import Unreachable, call
from collectors.localray import free_port
from dashboard.agents import commands as agent_commands
from dashboard.agents import tokens
from dashboard.agents.models import AgentCommand
from dashboard.gpus.models import Gpu, GpuSample
from tests import served
from tests.agents import agent_env, commands, gpu_record, report, running_agent
from tests.conftest import LiveServer, token_client, wait_for
from tests.patience import patient
from tests.served import embedded_env, manage, start_serve, stop_serve

# On SQLite too: an in-process ASGI server on the SQLite test database
pytestmark = [pytest.mark.both_backends, pytest.mark.django_db(transaction=True)]


def issue(node: str, node_ip: str = "") -> str:
    return tokens.issue(node, None, timezone.now(), node_ip)[1]


def test_an_agent_process_reports_its_gpus_and_they_show_in_the_api(  # type: ignore[no-untyped-def]
        live_server_asgi: LiveServer, admin: User, tmp_path: Path) -> None:
    token = issue("gpu-b")
    env = agent_env(live_server_asgi.url, token, tmp_path, "gpu-b", "10.9.0.3")
    api = token_client(admin)

    def shown() -> dict[str, tuple[str, str]] | None:
        gpus = {g["uuid"]: (g["node"], g["node_ip"]) for g in api.get("/api/gpus/").json()}
        return gpus if len(gpus) == 2 else None

    with running_agent(env, tmp_path / "agent.log"):
        gpus = wait_for(shown, 60, 0.2, "the agent's GPUs in /api/gpus/",
                        explain=lambda: (tmp_path / "agent.log").read_text()[-2000:])
    assert gpus == {"GPU-gpu-b-0": ("gpu-b", "10.9.0.3"), "GPU-gpu-b-1": ("gpu-b", "10.9.0.3")}
    # The node token opens the agent endpoints only, not the dashboard's API.
    assert call("GET", f"{live_server_asgi.url}/api/gpus/", token).status in (401, 403)


def test_a_token_cannot_report_another_nodes_gpus(live_server_asgi: LiveServer) -> None:
    url = live_server_asgi.url
    token_a, token_b = issue("gpu-a", "10.9.0.2"), issue("gpu-b", "10.9.0.3")
    assert report(url, token_a, 1, [gpu_record("GPU-a-0")]).status == 200
    samples = GpuSample.objects.count()

    refused = [
        report(url, token_b, 1, [gpu_record("GPU-a-0")]),  # A's GPU
        report(url, token_b, 1, [gpu_record("GPU-new", node="gpu-a")]),  # names node A
        report(url, token_b, 1, [gpu_record("GPU-new")], node="gpu-a"),  # the batch does
        report(url, token_b, 1, [gpu_record("GPU-new")], agent={"node": "gpu-a"}),
        report(url, token_b, 1, [gpu_record("GPU-new")], agent={"node_ip": "10.9.0.2"}),
    ]
    assert [r.status for r in refused] == [403] * 5, [r.body for r in refused]
    assert refused[0].body["seq"] == 1  # the agent drops that batch and goes on
    assert list(Gpu.objects.values_list("uuid", "node")) == [("GPU-a-0", "gpu-a")]
    assert GpuSample.objects.count() == samples


def test_a_batch_sent_again_is_acknowledged_not_stored_twice(
        live_server_asgi: LiveServer) -> None:
    url, token = live_server_asgi.url, issue("gpu-a")
    first = report(url, token, 7, [gpu_record("GPU-a-0")])
    again = report(url, token, 7, [gpu_record("GPU-a-0")])  # its answer was lost
    assert (first.body["stored"], again.body["duplicate"]) == ([7], [7])
    assert GpuSample.objects.count() == 1
    # Another spool (a wiped one starts a new stream) is not mistaken for a replay.
    assert report(url, token, 7, [gpu_record("GPU-a-0")], stream="s2").body["stored"] == [7]
    assert GpuSample.objects.count() == 2


def test_a_token_reads_and_answers_only_its_own_nodes_commands(
        live_server_asgi: LiveServer) -> None:
    url = live_server_asgi.url
    token_a, token_b = issue("gpu-a"), issue("gpu-b")
    now = timezone.now()
    for_a = agent_commands.create_signal(None, "gpu-a", 4242, "SIGTERM", 1.0, now)
    for_b = agent_commands.create_signal(None, "gpu-b", 4343, "SIGKILL", 2.0, now)

    seen_by_b = commands(url, token_b).body["commands"]
    assert [(c["id"], c["node"], c["payload"]["pid"]) for c in seen_by_b] == [
        (for_b.pk, "gpu-b", 4343)]
    answer = {"version": 1, "nonce": for_a.nonce, "outcome": "signalled", "detail": "x"}
    assert call("POST", f"{url}/api/agent/v1/commands/{for_a.pk}/result", token_b,
                answer).status == 404
    # A's command is still A's to take, signed with A's command key.
    [command] = commands(url, token_a).body["commands"]
    assert command["id"] == for_a.pk
    assert wire.signature_ok(wire.command_key(token_a), command)
    assert not wire.signature_ok(wire.command_key(token_b), command)


def test_an_expired_or_handed_out_command_is_never_served_again(
        live_server_asgi: LiveServer) -> None:
    url, token = live_server_asgi.url, issue("gpu-a")
    now = timezone.now()
    expired = agent_commands.create_signal(None, "gpu-a", 4242, "SIGTERM", 1.0,
                                           now - timedelta(minutes=5))
    live = agent_commands.create_signal(None, "gpu-a", 4343, "SIGTERM", 2.0, now)
    assert [c["id"] for c in commands(url, token).body["commands"]] == [live.pk]
    assert commands(url, token).body["commands"] == []
    result = f"{url}/api/agent/v1/commands/{live.pk}/result"
    answer = {"version": 1, "nonce": live.nonce, "outcome": "gone", "detail": "ended"}
    assert call("POST", result, token, answer).status == 200
    assert call("POST", result, token, answer).status == 409  # once
    never = call("POST", f"{url}/api/agent/v1/commands/{expired.pk}/result", token,
                 {**answer, "nonce": expired.nonce})
    assert never.status == 409
    assert AgentCommand.objects.get(pk=expired.pk).state == AgentCommand.EXPIRED


def test_a_waiting_agent_gets_a_command_as_soon_as_it_is_created(
        live_server_asgi: LiveServer) -> None:
    url, token = live_server_asgi.url, issue("gpu-a")
    got: list = []
    waiting = threading.Thread(target=lambda: got.append(commands(url, token, wait=20)))
    waiting.start()
    # The server holds the request; meanwhile it keeps serving others.
    assert call("GET", f"{url}/api/agent/v1/hello", token).body["node"] == "gpu-a"
    created = agent_commands.create_signal(None, "gpu-a", 4242, "SIGTERM", 1.0,
                                           timezone.now())
    waiting.join(30)
    assert [c["id"] for c in got[0].body["commands"]] == [created.pk]


# Production needs the suite's Postgres and Redis: not in the SQLite rerun of this file.
@pytest.mark.parametrize("topology", ["embedded"] + (
    ["production"] if os.environ.get("DATABASE_URL", "").startswith("postgres") else []))
def test_a_server_stopping_while_agents_wait_ends_their_waits_cleanly(
        tmp_path: Path, topology: str) -> None:
    """Every agent keeps a commands long-poll open all the time, so raywatch always stops
    (Ctrl-C, a deploy) with some waiting: they must end without a traceback in its log
    (the wait runs on the server's event loop, not inside a sync middleware's thread)."""
    (tmp_path / "logs").mkdir()
    env = embedded_env(tmp_path / "data", RAYWATCH_GPU_SOURCE="off",
                       RAY_API_SERVER_ADDRESS=f"http://127.0.0.1:{free_port()}",
                       RAYWATCH_LOG_DIRS=str(tmp_path / "logs"),
                       RAYWATCH_RAY_TMP_DIR=str(tmp_path / "logs"))
    with contextlib.ExitStack() as stack:
        if topology == "production":
            env.update(DATABASE_URL=stack.enter_context(
                served.scratch_database(os.environ["DATABASE_URL"])),
                REDIS_URL=os.environ["REDIS_URL"],
                RAYWATCH_CHANNEL_PREFIX=f"stop-{uuid.uuid4().hex[:6]}")
        served.migrate(env)
        tokens_ = manage(env, "shell", "-v", "0", "-c", ISSUE_TWELVE).split()
        port, log = free_port(), tmp_path / "serve.log"
        server = start_serve(env, port, log)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(url, tokens_[0]), 60, 0.3, "raywatch to answer",
                 explain=lambda: (tokens_[:1], log.read_text(errors="replace")[-3000:]))
        output = _stop_while_waiting(url, tokens_, server, log)
    assert "Traceback" not in output, output[-4000:]
    assert "never retrieved" not in output, output[-4000:]


ISSUE_TWELVE = """
from django.utils import timezone
from dashboard.agents import tokens
print(" ".join(tokens.issue(f"gpu-{i}", None, timezone.now(), "")[1] for i in range(12)))
"""


def _answers(url: str, token: str) -> bool:
    try:
        return call("GET", f"{url}/api/agent/v1/hello", token).status == 200
    except (OSError, Unreachable):
        return False


def _stop_while_waiting(url: str, tokens_: list[str], server: subprocess.Popen[bytes],
                        log: Path) -> str:
    replies: list = []
    clients = [threading.Thread(target=lambda t=t: replies.append(commands(url, t, wait=20)))
               for t in tokens_]
    for client in clients:
        client.start()
    time.sleep(3)  # all twelve are waiting in the server
    output = stop_serve(server, log)
    for client in clients:
        client.join(30)
    return output


def test_a_revoked_token_is_refused(live_server_asgi: LiveServer) -> None:
    url = live_server_asgi.url
    row, token = tokens.issue("gpu-a", None, timezone.now())
    assert call("GET", f"{url}/api/agent/v1/hello", token).status == 200
    tokens.revoke(row, None, timezone.now())
    refused = [call("GET", f"{url}/api/agent/v1/hello", token),
               report(url, token, 1, [gpu_record("GPU-a-0")]), commands(url, token)]
    assert [r.status for r in refused] == [401, 401, 401]
    assert "revoked" in refused[0].detail
    assert not Gpu.objects.exists()
    assert call("GET", f"{url}/api/agent/v1/hello", "rwa_" + "x" * 43).status == 401


def test_a_report_over_the_size_limit_is_told_so(live_server_asgi: LiveServer) -> None:
    url, token = live_server_asgi.url, issue("gpu-a")
    huge = [gpu_record(f"GPU-{i}", i, name="x" * 3000) for i in range(1000)]
    assert report(url, token, 1, huge).status == 413


def _raw_report(url: str, token: str, body: bytes, encoding: str) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{url}/api/agent/v1/report", data=body, method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                 "Content-Encoding": encoding})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_gzip_reports_are_stored_and_bombs_refused(live_server_asgi: LiveServer) -> None:
    import gzip
    import json

    url, token = live_server_asgi.url, issue("gpu-a")
    assert "gzip" in call("GET", f"{url}/api/agent/v1/hello", token).body["encodings"]
    at = wire.timestamp(timezone.now())
    body = json.dumps({"version": wire.VERSION, "agent": {"version": "test"}, "batches": [
        {"stream": "s1", "seq": 1, "at": at, "records": [
            {"kind": wire.GPU_POLL, "at": at, "error": None, "problems": [],
             "gpus": [gpu_record("GPU-a-0")]}]}]}).encode()
    assert _raw_report(url, token, gzip.compress(body), "gzip") == 200
    assert list(Gpu.objects.values_list("uuid", flat=True)) == ["GPU-a-0"]
    # 4 MiB of spaces inflate past the 2 MiB limit: refused as too large, nothing kept.
    bomb = gzip.compress(b"{" + b" " * (4 << 20) + b"}")
    assert len(bomb) < 10_000
    assert _raw_report(url, token, bomb, "gzip") == 413
    assert _raw_report(url, token, b"not gzip at all", "gzip") == 400
    assert _raw_report(url, token, body, "br") == 415
    assert GpuSample.objects.count() == 1


def test_the_agent_gzips_its_reports_once_hello_offers_it(  # type: ignore[no-untyped-def]
        live_server_asgi: LiveServer, tmp_path: Path, monkeypatch) -> None:
    from collectors.agent import main as agent_main
    from collectors.agent.config import AgentConfig
    from collectors.agent.spool import Spool

    env = agent_env(live_server_asgi.url, issue("gpu-b"), tmp_path, "gpu-b", "10.9.0.3")
    sent: list[dict] = []

    def recording_call(*args, **kwargs):  # type: ignore[no-untyped-def]
        reply = call(*args, **kwargs)
        sent.append({"url": args[1], "gzip_over": args[5] if len(args) > 5 else
                     kwargs.get("gzip_over"), "status": reply.status})
        return reply

    monkeypatch.setattr(agent_main, "call", recording_call)
    agent = agent_main.Agent(AgentConfig.from_env(env), Spool(tmp_path / "spool", 1 << 20))
    agent.spool.append([{"kind": wire.GPU_POLL, "at": wire.timestamp(timezone.now()),
                         "error": None, "problems": [], "gpus": [gpu_record("GPU-b-0")]}],
                       wire.timestamp(timezone.now()))
    agent.spool.append([{"kind": wire.GPU_POLL, "at": wire.timestamp(timezone.now()),
                         "error": None, "problems": [], "gpus": [gpu_record("GPU-b-0")]}],
                       wire.timestamp(timezone.now()))
    agent.per_request = 1
    from collectors.agent.main import Backoff

    assert agent.send_once(Backoff()) == 0.0  # before hello: plain JSON
    agent._guard()
    assert agent.send_once(Backoff()) == 0.0  # after: gzip over 1 KiB
    reports = [s for s in sent if s["url"].endswith("/report")]
    assert [(r["gzip_over"], r["status"]) for r in reports] == [(None, 200), (1024, 200)]
    assert GpuSample.objects.filter(gpu__uuid="GPU-b-0").count() == 2
    assert agent.send_once(Backoff()) is None  # the spool is empty


def test_an_agent_told_to_gather_sends_several_polls_a_report(  # type: ignore[no-untyped-def]
        live_server_asgi: LiveServer, tmp_path: Path) -> None:
    """RAYWATCH_AGENT_SEND_S=3: a GPU polled every second reaches raywatch three polls a
    report (a large cluster's agents cost raywatch a third of the writes), none lost."""
    env = agent_env(live_server_asgi.url, issue("gpu-g"), tmp_path, "gpu-g", "10.9.0.7",
                    gpus=1, RAYWATCH_AGENT_SEND_S="3")
    seen: list[int] = []

    def samples() -> int:
        return GpuSample.objects.filter(gpu__uuid="GPU-gpu-g-0").count()

    with running_agent(env, tmp_path / "agent.log"):
        wait_for(lambda: samples() > 0, 60, 0.1, "the first report",
                 explain=lambda: (tmp_path / "agent.log").read_text()[-2000:])
        # Three reports after the first (about 10 s; longer on a loaded machine, where the
        # agent's sends wait on a busy server).
        deadline = time.monotonic() + patient(60)
        while len(seen) < 4 and time.monotonic() < deadline:
            count = samples()
            if not seen or count != seen[-1]:
                seen.append(count)
            time.sleep(0.05)
    steps = [b - a for a, b in itertools.pairwise(seen)]
    assert len(steps) >= 2 and min(steps) >= 2, seen  # whole reports of several polls
    times = list(GpuSample.objects.filter(gpu__uuid="GPU-gpu-g-0").order_by("at")
                 .values_list("at", flat=True))
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert max(gaps) < 1.9, gaps  # a poll a second, every one of them stored

"""Many agents' reports are stored together (dashboard/agents/together.py: one
transaction, one COPY of all their GPU polls): each agent still gets its own answer,
nothing is lost or stored twice, and a bad report is refused on its own while the
others of its group are stored."""

from __future__ import annotations

import asyncio
import http.client
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from collectors.agent.client import call
from dashboard.agents import tokens
from dashboard.agents.ingest import BatchRefused, Sent, decode_report, ingest_reports, ingest_sent
from dashboard.agents.models import AgentStream, NodeToken
from dashboard.core.errors import ApiError
from dashboard.gpus.models import Gpu, GpuSample
from tests.agents import gpu_record, report_body
from tests.conftest import LiveServer


def issue(node: str) -> tuple[NodeToken, str]:
    return tokens.issue(node, None, timezone.now())


# A GPU name with a NUL: within what the decoder checks, refused by Postgres's text type.
REFUSED_BY_POSTGRES = "NVIDIA\x00A100"


def gpus_of(node: str, name: str = "NVIDIA A100") -> list[dict[str, Any]]:
    return [gpu_record(f"GPU-{node}-{i}", index=i, name=name) for i in range(2)]


@pytest.mark.django_db
def test_a_group_stores_each_report_once_and_answers_each_agent() -> None:
    nodes = [issue(f"gpu-{n}")[0] for n in range(4)]
    first = ingest_reports([decode_report(t, report_body(1, gpus_of(t.node))) for t in nodes],
                           timezone.now())
    # Next: node 0 sends batch 1 again (its answer was lost) beside new batches.
    again = [decode_report(nodes[0], report_body(1, gpus_of("gpu-0"))),
             *(decode_report(t, report_body(2, gpus_of(t.node))) for t in nodes[1:])]
    second = ingest_reports(again, timezone.now())
    assert [(a["node"], a["stored"], a["duplicate"]) for a in first] == [
        (f"gpu-{n}", [1], []) for n in range(4)]
    assert [(a["node"], a["stored"], a["duplicate"]) for a in second] == [
        ("gpu-0", [], [1]), *((f"gpu-{n}", [2], []) for n in range(1, 4))]
    assert GpuSample.objects.count() == 2 * (4 + 3)
    assert sorted(AgentStream.objects.values_list("token__node", "last_seq")) == [
        ("gpu-0", 1), ("gpu-1", 2), ("gpu-2", 2), ("gpu-3", 2)]


@pytest.mark.django_db
def test_a_report_with_another_nodes_gpu_is_refused_and_the_rest_of_its_group_stored(
        ) -> None:
    a, b, c = (issue(node)[0] for node in ("gpu-a", "gpu-b", "gpu-c"))
    ingest_reports([decode_report(a, report_body(1, gpus_of("gpu-a")))], timezone.now())
    outcomes = ingest_reports([
        decode_report(b, report_body(5, [gpu_record("GPU-gpu-a-0")])),  # a's GPU
        decode_report(c, report_body(1, gpus_of("gpu-c"))),
    ], timezone.now())
    refused, stored = outcomes
    assert isinstance(refused, BatchRefused)
    assert (refused.status, refused.seq) == (403, 5)
    assert isinstance(stored, dict) and stored["stored"] == [1]
    assert dict(Gpu.objects.values_list("uuid", "node")) == {
        "GPU-gpu-a-0": "gpu-a", "GPU-gpu-a-1": "gpu-a",
        "GPU-gpu-c-0": "gpu-c", "GPU-gpu-c-1": "gpu-c"}
    assert not AgentStream.objects.filter(token=b).exists()  # its batch 5 is not taken


@pytest.mark.django_db
def test_a_gpu_its_node_stopped_reporting_long_ago_may_move(settings) -> None:  # type: ignore[no-untyped-def]
    """A card moved to another node (or a node renamed, rebuilt): once its old node has
    not reported it for RAYWATCH_GPU_OWNER_HOLD_H, the node that reports it now has it
    (issue 43, L6). Within the hold, the old node's GPU stays its own."""
    settings.GPU_OWNER_HOLD_H = 1.0
    a, b = (issue(node)[0] for node in ("gpu-a", "gpu-b"))
    then = timezone.now() - timedelta(hours=2)
    ingest_reports([decode_report(a, report_body(1, gpus_of("gpu-a")))], timezone.now())
    refused = ingest_reports([decode_report(b, report_body(1, [gpu_record("GPU-gpu-a-0")]))],
                             timezone.now())[0]
    assert isinstance(refused, BatchRefused) and refused.status == 403  # reported lately
    Gpu.objects.filter(uuid="GPU-gpu-a-0").update(at=then)  # gpu-a reported it 2 h ago
    moved = ingest_reports([decode_report(b, report_body(2, [gpu_record("GPU-gpu-a-0")]))],
                           timezone.now())[0]
    assert isinstance(moved, dict) and moved["stored"] == [2], moved
    assert Gpu.objects.get(uuid="GPU-gpu-a-0").node == "gpu-b"


@pytest.mark.django_db
def test_a_report_the_database_refuses_fails_alone() -> None:
    good = [issue(f"gpu-{n}")[0] for n in range(3)]
    bad = issue("gpu-bad")[0]
    reports = [decode_report(t, report_body(1, gpus_of(t.node))) for t in good[:2]]
    reports.append(decode_report(bad, report_body(1, gpus_of("gpu-bad", REFUSED_BY_POSTGRES))))
    reports.append(decode_report(good[2], report_body(1, gpus_of("gpu-2"))))
    outcomes = ingest_reports(reports, timezone.now())
    assert [o["stored"] for o in outcomes if isinstance(o, dict)] == [[1], [1], [1]]
    refused = outcomes[2]  # a GPU name the database refuses: refused by its seq
    assert isinstance(refused, BatchRefused) and (refused.status, refused.seq) == (400, 1)
    assert set(Gpu.objects.values_list("node", flat=True)) == {"gpu-0", "gpu-1", "gpu-2"}
    assert not AgentStream.objects.filter(token=bad).exists()


@pytest.mark.django_db
def test_one_bad_batch_is_refused_by_its_seq_and_the_agent_moves_past_it() -> None:
    """Batches 1-3 in one report, batch 2's GPU name one the database refuses: batch 1
    is stored and batch 2 refused by its seq (the agent drops it); the agent's next
    report (batch 3, and 1 again: its answer said nothing of 1) is stored. Before, the
    whole report was refused without a seq, and the agent sent it again for ever."""
    token = issue("gpu-m")[0]
    bodies = [report_body(seq, [gpu_record("GPU-gpu-m-9", name=REFUSED_BY_POSTGRES)]
                          if seq == 2 else gpus_of("gpu-m")) for seq in (1, 2, 3)]
    whole = {**bodies[0], "batches": [b["batches"][0] for b in bodies]}
    refused = ingest_reports([decode_report(token, whole)], timezone.now())[0]
    assert isinstance(refused, BatchRefused) and (refused.status, refused.seq) == (400, 2)
    assert "batch 2" in refused.message
    rest = {**bodies[0], "batches": [bodies[0]["batches"][0], bodies[2]["batches"][0]]}
    answer = ingest_reports([decode_report(token, rest)], timezone.now())[0]
    assert isinstance(answer, dict), answer
    assert (answer["stored"], answer["duplicate"]) == ([3], [1])
    assert GpuSample.objects.count() == 2 * 2  # batches 1 and 3, two GPUs each


@pytest.mark.django_db
def test_a_report_raywatch_cannot_read_is_refused_alone_in_its_group() -> None:
    """A value no check foresaw (a 400-digit number where NVML gives a float), or JSON
    nested past what the parser takes: that report is refused with a 400, the others
    sent with it are stored."""
    tokens_by_node = {node: issue(node)[1] for node in ("gpu-g", "gpu-h", "gpu-i")}

    def sent(node: str, body: bytes) -> Sent:
        return Sent(f"Bearer {tokens_by_node[node]}", "127.0.0.1", body, "identity")

    huge = report_body(7, [gpu_record("GPU-gpu-h-0", utilization_gpu=10 ** 400)])
    outcomes = ingest_sent([
        sent("gpu-g", json.dumps(report_body(1, gpus_of("gpu-g"))).encode()),
        sent("gpu-h", json.dumps(huge).encode()),
        sent("gpu-i", b"[" * 100_000 + b"]" * 100_000),
    ], timezone.now())
    assert isinstance(outcomes[0], dict) and outcomes[0]["stored"] == [1]
    assert isinstance(outcomes[1], BatchRefused) and (outcomes[1].status,
                                                      outcomes[1].seq) == (400, 7)
    assert isinstance(outcomes[2], ApiError) and outcomes[2].status == 400
    assert set(Gpu.objects.values_list("node", flat=True)) == {"gpu-g"}


@pytest.mark.django_db(transaction=True)
def test_concurrent_reports_of_many_agents_are_stored_exactly_once(
        live_server_asgi: LiveServer) -> None:
    agents = [issue(f"gpu-{n:02d}")[1] for n in range(24)]
    bad = issue("gpu-bad")[1]
    url = f"{live_server_asgi.url}/api/agent/v1/report"

    def agent(n: int) -> list[tuple[int, Any, Any]]:
        """Batches 1-3, then 3 again (an answer lost): what each answer said. The last
        agent's GPU name is longer than raywatch keeps."""
        answers = []
        for seq in (1, 2, 3, 3):
            token, name = (bad, "x" * 300) if n == len(agents) else (agents[n], "A100")
            reply = call("POST", url, token, report_body(seq, gpus_of(f"gpu-{n:02d}", name)))
            answers.append((reply.status, reply.body.get("stored"),
                            reply.body.get("duplicate", reply.body.get("seq"))))
        return answers

    with ThreadPoolExecutor(len(agents) + 1) as pool:
        answers = list(pool.map(agent, range(len(agents) + 1)))
    assert answers[:-1] == [[(200, [1], []), (200, [2], []), (200, [3], []), (200, [], [3])]
                            ] * len(agents)
    assert answers[-1] == [(400, None, seq) for seq in (1, 2, 3, 3)]  # refused by seq
    assert GpuSample.objects.count() == len(agents) * 3 * 2
    assert set(AgentStream.objects.values_list("last_seq", flat=True)) == {3}


@pytest.mark.django_db(transaction=True)
def test_the_report_route_keeps_djangos_host_check_and_methods(
        live_server_asgi: LiveServer) -> None:
    token = issue("gpu-a")[1]
    port = int(live_server_asgi.url.rsplit(":", 1)[1])
    body = json.dumps(report_body(1, gpus_of("gpu-a"))).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    assert _status(port, "POST", body, {**headers, "Host": "evil.example"}) == 400
    assert _status(port, "GET", b"", headers) == 405
    assert _status(port, "POST", body, headers) == 200
    assert GpuSample.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_plain_http_reports_are_redirected_where_raywatch_wants_https(settings: Any) -> None:
    """RAYWATCH_SSL_REDIRECT: a report over plain HTTP gets Django's redirect to HTTPS,
    as every other request does, and nothing of it is stored; over HTTPS it is stored.
    The ASGI app is built after the setting, as at a real start (Django's middleware
    reads it once)."""
    from django.core.asgi import get_asgi_application

    from dashboard.agents.reports import PATH, with_reports

    settings.SECURE_SSL_REDIRECT = True
    app = with_reports(get_asgi_application())
    token = issue("gpu-s")[1]
    body = json.dumps(report_body(1, gpus_of("gpu-s"))).encode()

    async def post(scheme: str) -> int:
        sent: list[dict[str, Any]] = []
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if not messages:  # the client stays connected until answered
                await asyncio.Event().wait()
            return messages.pop(0)

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": PATH, "root_path": "",
                 "scheme": scheme, "query_string": b"", "server": ("testserver", 443),
                 "client": ("127.0.0.1", 5000), "http_version": "1.1",
                 "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                             (b"authorization", f"Bearer {token}".encode())]}
        await app(scope, receive, send)
        return int(sent[0]["status"])

    assert async_to_sync(post)("http") == 301
    assert GpuSample.objects.count() == 0
    assert async_to_sync(post)("https") == 200
    assert GpuSample.objects.count() == 2


def _status(port: int, method: str, body: bytes, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, "/api/agent/v1/report", body, headers)
        return connection.getresponse().status
    finally:
        connection.close()

"""Schemathesis against the live app: every operation in /api/schema/, fed generated
valid and invalid input as an admin, never answers with a server error (5xx).

The action endpoints (terminate, stop, kill) are fuzzed too: raywatch knows no trial,
job or GPU process here and Ray points at a closed port, so each request is refused
before anything could act. docs/api.md ("The schema, and fuzzing it") has the same command
to run against a deployment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from collectors.localray import free_port
from collectors.records import NodeRecord, ResourceUse
from dashboard.alerts.models import Silence
from dashboard.cluster.state import ingest_nodes
from dashboard.incidents.findings import Finding
from dashboard.incidents.service import sync_findings
from tests.conftest import LiveServer, api_token

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
MAX_EXAMPLES = 30
MAX_TIME_S = 30


@pytest.fixture
def nowhere_ray(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = f"http://127.0.0.1:{free_port()}"
    settings.RAY_GCS_ADDRESS = None
    settings.LOCAL_RAY_FILE = tmp_path / "no-local-ray.json"


def some_state() -> None:
    """A node, a firing incident and a silence, so the lists serialise real rows."""
    now = timezone.now()
    ingest_nodes([NodeRecord(
        node_id="a" * 56, node_ip="10.0.0.1", hostname="gpu-1", is_head=True, state="ALIVE",
        state_message=None, started_at=datetime(2026, 11, 21, tzinfo=UTC), ended_at=None,
        resources={"CPU": ResourceUse(total=8, used=2), "GPU": ResourceUse(total=4, used=1)},
    )], now)
    stalled = Finding("trial_stalled", "trial:mnist/t_0001", "critical", "no result for 9 min")
    sync_findings({stalled.kind}, [stalled], now, {stalled.subject: {"experiment": "mnist"}})
    Silence.objects.create(kind="gpu_idle", starts_at=now, ends_at=now.replace(year=now.year + 1),
                           comment="maintenance")


def test_no_operation_answers_with_a_server_error(live_server_asgi: LiveServer, admin,  # type: ignore[no-untyped-def]
                                                  nowhere_ray: None, tmp_path: Path) -> None:
    some_state()
    token = api_token(admin)
    command = [
        str(SCHEMATHESIS), "run", f"{live_server_asgi.url}/api/schema/",
        "--header", f"Authorization: Token {token}",
        "--checks", "not_a_server_error",
        "--max-examples", str(MAX_EXAMPLES), "--max-time", str(MAX_TIME_S),
        "--seed", "20261121", "--generation-database", "none",
        "--request-timeout", "10", "--workers", "1", "--no-color",
        "--report", "junit", "--report-dir", str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=MAX_TIME_S + 90,
                            cwd=tmp_path,  # its replay cache goes there
                            env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false"})
    summary = result.stdout[-6000:]
    print(summary)
    assert result.returncode == 0, summary + result.stderr[-2000:]
    assert "passed" in summary


@pytest.mark.parametrize("path", [
    "/api/trials/?experiment=%00K", "/api/alerts/?group=a%00b", "/api/actors/?node_id=%00",
    "/api/trials/t%00/results/", "/api/gpus/GPU-%00/samples/", "/api/audit/?state=%00",
    "/cluster/?x%00=1",
])
def test_nul_character_in_the_url_is_a_bad_request(admin, path: str) -> None:  # type: ignore[no-untyped-def]
    """What the fuzzing first found: Postgres holds no NUL, and a query with one was a 500."""
    token = api_token(admin)
    reply = Client(HTTP_AUTHORIZATION=f"Token {token}").get(path)
    assert reply.status_code == 400
    assert "NUL" in reply.json()["detail"]

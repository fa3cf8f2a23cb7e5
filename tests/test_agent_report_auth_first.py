"""The report route knows who is sending before it takes the body: a request with an
unknown, revoked or expired token (or none) is answered 401 while its body has not
come, so a stranger cannot make raywatch read and hold 2 MiB a request. A live token's
report is read and stored as before."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.agents import tokens
from dashboard.agents.models import NodeToken
from dashboard.gpus.models import Gpu
from tests.agents import gpu_record, report
from tests.conftest import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)
BODY_BYTES = 1_000_000


def headers_only(url: str, authorization: str | None) -> str:
    """Send a report's headers, announcing a 1 MB body, and none of the body: the status
    line raywatch answers with, or "" when it waits for the body."""
    host, port = url.removeprefix("http://").split(":")
    lines = ["POST /api/agent/v1/report HTTP/1.1", f"Host: {host}",
             "Content-Type: application/json", f"Content-Length: {BODY_BYTES}"]
    if authorization:
        lines.append(f"Authorization: {authorization}")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        sock.settimeout(3)
        try:
            return sock.recv(4096).decode(errors="replace").split("\r\n")[0]
        except TimeoutError:
            return ""


def test_a_report_of_no_live_token_is_refused_before_its_body(
        live_server_asgi: LiveServer) -> None:
    url, now = live_server_asgi.url, timezone.now()
    revoked_row, revoked = tokens.issue("gpu-r", None, now)
    tokens.revoke(revoked_row, None, now)
    expired_row, expired = tokens.issue("gpu-e", None, now)
    NodeToken.objects.filter(pk=expired_row.pk).update(expires_at=now - timedelta(seconds=1))
    live = tokens.issue("gpu-l", None, now)[1]

    answers = {who: headers_only(url, header) for who, header in [
        ("none", None), ("unknown", "Bearer rwa_" + "x" * 43),
        ("revoked", f"Bearer {revoked}"), ("expired", f"Bearer {expired}")]}
    assert answers == dict.fromkeys(answers, "HTTP/1.1 401 Unauthorized"), answers
    assert headers_only(url, f"Bearer {live}") == ""  # its body is awaited, as it should be
    assert report(url, live, 1, [gpu_record("GPU-l-0")]).status == 200
    assert list(Gpu.objects.values_list("node", flat=True)) == ["gpu-l"]

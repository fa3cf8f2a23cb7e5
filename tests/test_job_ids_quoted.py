"""A Ray job's submission id is whatever its submitter chose, and Ray keeps it unchecked
(issue 43, L4): raywatch's Stop and its checks ask Ray's Jobs API for that job and no
other. A real HTTP server stands in for the dashboard and records the paths it is asked:
an id with `/`, `..` and `?` arrives as one quoted path segment."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from collectors.raykill import job_url, stop_job
from collectors.raystate import RayEndpoint


def test_a_hostile_submission_id_names_its_own_job_only() -> None:
    asked: list[tuple[str, str]] = []

    class Dashboard(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            asked.append(("POST", self.path))
            body = json.dumps({"stopped": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = RayEndpoint(f"http://127.0.0.1:{server.server_address[1]}")
        hostile = "raysubmit_x/../../api/jobs/raysubmit_victim/stop?a=b#c"
        assert stop_job(endpoint, hostile) is True
        assert stop_job(endpoint, "raysubmit_plain") is True
    finally:
        server.shutdown()
        server.server_close()
    assert asked == [
        ("POST", "/api/jobs/raysubmit_x%2F..%2F..%2Fapi%2Fjobs%2Fraysubmit_victim%2Fstop"
                 "%3Fa%3Db%23c/stop"),
        ("POST", "/api/jobs/raysubmit_plain/stop")]
    assert job_url(endpoint, "a b") == f"{endpoint.dashboard_url}/api/jobs/a%20b"

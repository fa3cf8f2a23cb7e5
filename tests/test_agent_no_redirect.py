"""The agent never follows a redirect (issue 43, L1): urllib would send its bearer token
on to wherever a 3xx points, another host or https to http. A real HTTP server answers
302 and 307 toward a second one that records what reaches it: the agent's call returns
the 3xx as raywatch's answer, and the second server sees no request, so no token."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from collectors.agent.client import call


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_an_answer_and_the_token_goes_nowhere() -> None:
    reached: list[dict[str, str]] = []

    class Catcher(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reached.append(dict(self.headers))
            self.send_response(200)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    with serving(Catcher) as elsewhere:
        for status in (302, 307):

            class Redirector(BaseHTTPRequestHandler):
                code = status

                def do_POST(self) -> None:
                    self.send_response(self.code)
                    self.send_header("Location", f"{elsewhere}/harvest")
                    self.send_header("Content-Length", "0")
                    self.end_headers()

                def log_message(self, *args: object) -> None:
                    pass

            with serving(Redirector) as raywatch:
                reply = call("POST", f"{raywatch}/api/agent/v1/report", "rwa_secret",
                             {"batches": []})
            assert reply.status == status and reply.detail == f"HTTP {status}"
    assert reached == []  # the token, and the request, went nowhere else

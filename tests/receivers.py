"""Real HTTP receivers on loopback: the alert tests' webhook Receiver (it records what it
got and answers as scripted: a status, a pause, or hanging until released), raywatch's
agent API as an agent sees it (AgentApiStandIn), and the two parts every stand-in server
of the tests and benches is made of (JsonHandler, serve). Standard library only:
tests/device_agent_check.py runs this where there is no Django."""

from __future__ import annotations

import gzip
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from collectors.agent import wire


class JsonHandler(BaseHTTPRequestHandler):
    """A stand-in's request handler: answers JSON and logs nothing."""

    def answer(self, body: Any, status: int = 200) -> None:
        raw = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client is gone (an agent stopped during its long-poll): no one to tell

    def body(self) -> bytes:
        """The request's body, gunzipped when it came gzipped."""
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        return gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw

    def log_message(self, *args: Any) -> None:
        pass


def serve(handler: type[BaseHTTPRequestHandler], port: int = 0, backlog: int = 5
          ) -> ThreadingHTTPServer:
    """`handler` on 127.0.0.1 (a free port unless one is given) in a daemon thread, until
    shutdown(); `backlog`: connections waiting to be accepted (bursts from many senders)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler, bind_and_activate=False)
    server.daemon_threads, server.request_queue_size = True, backlog  # before listen()
    try:
        server.server_bind()
        server.server_activate()
    except OSError:
        server.server_close()
        raise
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int | None = None  # the status sent back, None if it never answered
    at: float = field(default_factory=time.time)  # once the whole body was read

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """`script`: what to answer to each request in turn (the last one repeats): an int
    status, ("sleep", seconds, status), or "hang" (no answer until `release()`)."""

    script: list[Any] = field(default_factory=lambda: [200])
    requests: list[Received] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Receiver:
        receiver = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                got = Received(self.path, dict(self.headers), body)
                with receiver.lock:
                    step = receiver.script[min(len(receiver.requests), len(receiver.script) - 1)]
                    receiver.requests.append(got)
                status = receiver.answer(step)
                if status is None:
                    return
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                    got.answered = status
                except OSError:
                    pass  # the sender is gone

        self.lock = threading.Lock()
        self.server = serve(Handler, backlog=128)  # bursts from several senders at once
        self.port = int(self.server.server_address[1])
        self.url = self.url_for("/hook")
        return self

    def url_for(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, step: Any) -> int | None:
        if step == "hang":
            self.released.wait(120)
            return None
        if isinstance(step, tuple):
            time.sleep(step[1])
            return int(step[2])
        return int(step)

    def release(self) -> None:
        self.released.set()

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[Any]:
        return [r.json for r in self.requests]

    def accepted(self) -> list[Any]:
        return [r.json for r in self.requests if r.answered and 200 <= r.answered < 300]


# --- raywatch's agent API, stood in for ---------------------------------------------------
API = "/api/agent/v1/"


def signed_command(key: str, pk: int, kind: str, node: str, payload: dict[str, Any],
                   ttl_s: float = 30.0) -> dict[str, Any]:
    """A command as raywatch hands it to an agent (dashboard/agents/commands.py:signed),
    signed with `key` (the token's command key, or a forger's guess)."""
    now = datetime.now(UTC)
    body = {"id": pk, "kind": kind, "node": node, "action_id": None, "nonce": f"{pk:032x}",
            "issued_at": wire.timestamp(now),
            "expires_at": wire.timestamp(now + timedelta(seconds=ttl_s)), "payload": payload}
    return {**body, "signature": wire.sign_command(key, body)}


class AgentApiStandIn:
    """Whoever answers at raywatch's address in its place (a test; in an attack, a DNS
    entry or a proxy): it speaks the agent protocol (hello, report, commands, a command's
    result), keeps every report and result, and hands the agent the commands it is given."""

    def __init__(self, node: str, node_ip: str | None = None,
                 encodings: Iterable[str] = ("gzip",)) -> None:
        self.reports: list[dict[str, Any]] = []
        self.results: dict[int, dict[str, Any]] = {}
        self.waiting: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        stand_in, hello = self, {"version": wire.VERSION, "node": node, "node_ip": node_ip,
                                 "encodings": list(encodings)}

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                if path == f"{API}hello":
                    return self.answer(hello)
                if path != f"{API}commands":
                    return self.answer({"detail": "not found"}, 404)
                with stand_in.changed:  # a short long-poll
                    stand_in.changed.wait_for(lambda: stand_in.waiting, 0.5)
                    handed, stand_in.waiting = stand_in.waiting, []
                self.answer({"version": wire.VERSION, "commands": handed,
                             "server_time": wire.timestamp(datetime.now(UTC))})

            def do_POST(self) -> None:
                body = json.loads(self.body())
                if self.path == f"{API}report":
                    stand_in.keep(lambda: stand_in.reports.append(body))
                    return self.answer({"version": wire.VERSION, "duplicate": [],
                                        "stored": [b["seq"] for b in body["batches"]],
                                        "skipped": {}, "send_s": 0})
                if not (match := re.fullmatch(rf"{API}commands/(\d+)/result", self.path)):
                    return self.answer({"detail": "not found"}, 404)
                pk = int(match[1])
                stand_in.keep(lambda: stand_in.results.__setitem__(pk, body))
                self.answer({"version": wire.VERSION, "id": pk, "state": "done",
                             "outcome": body.get("outcome")})

        self.server = serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def keep(self, change: Callable[[], None]) -> None:
        with self.changed:
            change()
            self.changed.notify_all()

    def wait(self, found: Callable[[], Any], timeout_s: float) -> Any:
        """`found()` once it is true, else its last value after `timeout_s`."""
        with self.changed:
            return self.changed.wait_for(found, timeout_s)

    def send(self, command: dict[str, Any]) -> None:
        self.keep(lambda: self.waiting.append(command))

    def result(self, pk: int, timeout_s: float = 30.0) -> dict[str, Any]:
        """Command `pk`'s result as the agent posted it."""
        if not self.wait(lambda: pk in self.results, timeout_s):
            raise TimeoutError(f"the agent posted no result for command {pk} in {timeout_s} s")
        return self.results[pk]

    def forget(self, pk: int) -> None:
        """Drop command `pk`'s result (to see the agent's answer to it again)."""
        self.keep(lambda: self.results.pop(pk, None))

    def records(self, kind: str) -> list[dict[str, Any]]:
        """Every record of `kind` (wire.GPU_POLL, ...) reported so far, oldest first."""
        with self.changed:
            return [r for report in self.reports for batch in report["batches"]
                    for r in batch["records"] if r["kind"] == kind]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""Real HTTP receivers on loopback for the alert tests: each records what it got and
answers as scripted (a status, a pause, or hanging until released)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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

        class Handler(BaseHTTPRequestHandler):
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

            def log_message(self, *args: Any) -> None:
                pass

        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.request_queue_size = 128  # bursts from several senders at once
        self.port = int(self.server.server_address[1])
        self.url = self.url_for("/hook")
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
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

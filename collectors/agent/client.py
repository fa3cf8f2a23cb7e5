"""The one function every request of the agent goes through: the token header, a
timeout, http/https only, and an answer whatever the status (a status is the
protocol's word, not an error). Only an unreachable raywatch raises.

A redirect is never followed: urllib would send the token on to wherever it points (any
host, https to http). raywatch's API does not redirect; a 3xx is an answer like any
other status, and the agent says it (issue 43, L1)."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlparse

from collectors.agent import AGENT_VERSION

GZIP_LEVEL = 6  # a report of 8 GPUs, 50 workers and 50 trial lines: about 10x smaller


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError: the answer, as it is


_OPENER = urllib.request.build_opener(_NoRedirect)


class Unreachable(Exception):
    """raywatch did not answer: refused, timed out, unknown host, TLS failure."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the JSON answer, or None
    retry_after: float | None  # seconds, from Retry-After

    @property
    def detail(self) -> str:
        if isinstance(self.body, dict) and self.body.get("detail"):
            return str(self.body["detail"])
        return f"HTTP {self.status}"


def call(method: str, url: str, token: str, payload: Any = None, timeout: float = 10.0,
         gzip_over: int | None = None) -> Reply:
    """`gzip_over`: gzip a body longer than this many bytes (only once raywatch's hello
    offered gzip)."""
    if urlparse(url).scheme not in ("http", "https"):
        raise Unreachable(f"refusing {url!r}: only http/https")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json",
               "User-Agent": f"raywatch-agent/{AGENT_VERSION}"}
    data = None
    if payload is not None:
        data, content = encode_body(payload, gzip_over)
        headers.update(content)
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            return Reply(answer.status, _json(answer.read()), None)
    except urllib.error.HTTPError as exc:
        with exc:
            return Reply(exc.code, _json(exc.read()), retry_after(exc.headers.get("Retry-After")))
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unreachable(f"cannot reach {urlparse(url).netloc}: {reason}") from None


def encode_body(payload: Any, gzip_over: int | None = None) -> tuple[bytes, dict[str, str]]:
    """A request body (bytes: JSON the caller encoded already) and its content headers;
    gzipped when longer than `gzip_over` bytes."""
    data = payload if isinstance(payload, bytes) else json.dumps(
        payload, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json"}
    if gzip_over is not None and len(data) > gzip_over:
        data = gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return data, headers


def retry_after(value: str | None) -> float | None:
    """Retry-After in seconds, given as seconds or as an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None

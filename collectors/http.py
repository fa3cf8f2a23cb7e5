"""The one function every outbound HTTP request of the collectors goes through.

It sets a timeout, refuses schemes other than http/https, never follows a redirect
with credentials (urllib's own handler sends Authorization and Cookie on to
wherever the Location points) and turns every failure into a SourceError whose
message an operator can act on. Tests patch this seam, not urllib.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlparse

# Headers that say who raywatch is: never sent on to where a redirect points.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


class SourceError(Exception):
    """A source could not be read. `message` is shown to operators as is. `status` and
    `body` (its first characters) are the HTTP answer's, when there was one."""

    def __init__(self, message: str, *, auth: bool = False, status: int | None = None,
                 body: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.auth = auth
        self.status = status
        self.body = body


def get_json(url: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0) -> Any:
    return request_json(url, headers=headers, timeout=timeout)


def post_json(url: str, payload: Any, *, headers: dict[str, str] | None = None,
              timeout: float = 10.0) -> Any:
    return request_json(url, headers={"Content-Type": "application/json", **(headers or {})},
                        timeout=timeout, method="POST", body=json.dumps(payload).encode())


def request_json(url: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0,
                 method: str = "GET", body: bytes | None = None) -> Any:
    answer = request_bytes(url, headers={"Accept": "application/json", **(headers or {})},
                           timeout=timeout, method=method, body=body)
    try:
        return json.loads(answer)
    except ValueError:
        raise SourceError(f"{_where(url)} answered with something that is not JSON") from None


def get_text(url: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0,
             max_bytes: int = 1 << 20) -> str:
    """A text answer (a py-spy dump), at most `max_bytes` of it."""
    return request_bytes(url, headers={"Accept": "text/plain", **(headers or {})},
                         timeout=timeout, max_bytes=max_bytes).decode(errors="replace")


def request_bytes(url: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0,
                  method: str = "GET", body: bytes | None = None,
                  max_bytes: int | None = None) -> bytes:
    scheme = urlparse(url).scheme
    if scheme not in ("http", "https"):
        shown = re.sub(r"//[^/@]*@", "//", url)  # never a password written into it
        raise SourceError(f"refusing {scheme or 'a scheme-less'} URL {shown!r}: only http/https")
    request = urllib.request.Request(url, headers=headers or {}, method=method, data=body)
    try:
        with _OPENER.open(request, timeout=timeout) as reply:
            return reply.read(max_bytes) if max_bytes else reply.read()
    except urllib.error.HTTPError as exc:
        said = _said(exc)
        if exc.code in (401, 403):
            raise SourceError(
                f"{_where(url)} refused our credentials (HTTP {exc.code})", auth=True,
                status=exc.code, body=said,
            ) from None
        raise SourceError(f"{_where(url)} answered HTTP {exc.code} {exc.reason}",
                          status=exc.code, body=said) from None
    except urllib.error.URLError as exc:
        raise SourceError(f"cannot reach {_where(url)}: {_reason(exc.reason)}") from None
    except TimeoutError:
        raise SourceError(f"{_where(url)} did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise SourceError(f"cannot reach {_where(url)}: {exc}") from None
    except http.client.IncompleteRead as exc:
        raise SourceError(f"{_where(url)} cut its answer short ({len(exc.partial)} bytes "
                          "of it came)") from None
    except http.client.HTTPException as exc:
        # Another service's port (Ray's GCS, SSH), or a proxy that breaks the answer:
        # urllib raises these outside URLError, and serve's start once died of one.
        raise SourceError(f"{_where(url)} did not answer in HTTP "
                          f"({type(exc).__name__}: {str(exc)[:80]!r})") from None


class _RedirectsWithoutCredentials(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only when the request carries no credentials: a dashboard
    address (or a proxy before it) that points elsewhere never gets the Ray token sent
    there. The operator is told where it pointed, to give that address instead."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> urllib.request.Request | None:
        if CREDENTIAL_HEADERS.isdisjoint(name.lower() for name, _ in req.header_items()):
            return super().redirect_request(req, fp, code, msg, headers, newurl)
        fp.close()
        raise SourceError(
            f"{_where(req.full_url)} redirects to {_where(newurl)} (HTTP {code}): raywatch "
            "sends no credentials on to where a redirect points; give the address it "
            "redirects to", status=code)


_OPENER = urllib.request.build_opener(_RedirectsWithoutCredentials)


def _said(exc: urllib.error.HTTPError) -> str:
    """The start of an error answer's body: what the server said, in its words."""
    try:
        return exc.read(4096).decode(errors="replace")
    except OSError:
        return ""


def _where(url: str) -> str:
    """The URL as an operator may see it (status strip, logs): no query, and never a
    user name or password written into it."""
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc.rpartition('@')[2]}{parsed.path}"


def _reason(reason: object) -> str:
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, socket.gaierror):
        return "unknown host"
    return str(reason)

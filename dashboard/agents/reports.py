"""POST /api/agent/v1/report as a route in front of Django's ASGI handler.

Every node agent posts a report every second or few (512 nodes: 100 to 500 requests a
second). Through Django each one paid its handler and middleware chain, whose sync
middlewares (sessions, CSRF, auth, messages: nothing an agent uses) hop to a thread of
the request's own and back, twice each: two thirds of the web process's CPU at 512
reports a second, more than storing them together (bench/gpu_reports_bench.py). This
route reads the body and hands it to `api.stored`, the view's own code: the same
answers, bounds, host check and size limit. It reads no body before the token is known
live (tokens.admit): a stranger cannot make raywatch take in 2 MiB per request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from dashboard.agents import tokens
from dashboard.agents.api import answer, refusal, stored

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
PATH = "/api/agent/v1/report"


class Gone(Exception):
    """The agent hung up before its body arrived."""


def with_reports(app: App) -> App:
    """`app`, with POST report answered before it."""
    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"].removeprefix(scope.get("root_path", "")) == PATH
                and not _to_redirect(scope)):
            await report(scope, receive, send)
        else:
            await app(scope, receive, send)
    return route


async def report(scope: Scope, receive: Receive, send: Send) -> None:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    if not _host_allowed(headers.get("host", "")):
        response = answer({"detail": "this Host is not allowed"}, 400)
    elif (refused := await _refused(headers.get("authorization"))) is not None:
        response = refused  # before a byte of the body is read
    else:
        try:
            body = await _body(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        except Gone:
            return
        client = scope.get("client")
        response = await stored(headers.get("authorization"), client[0] if client else "",
                                body, headers.get("content-encoding", "identity"))
    response["Content-Length"] = str(len(response.content))  # as CommonMiddleware sets it
    await send({"type": "http.response.start", "status": response.status_code,
                "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                            for k, v in response.items()]})
    await send({"type": "http.response.body", "body": response.content})


async def _refused(header: str | None) -> JsonResponse | None:
    """The answer to a report whose token is not live (401), or whose check failed
    (503: the database); None to read its body."""
    if tokens.admitted_lately(header):
        return None
    try:
        refused = await database_sync_to_async(tokens.admit, thread_sensitive=False)(
            header, timezone.now())
    except Exception as exc:
        return refusal(exc)
    return refusal(refused) if refused is not None else None


def _to_redirect(scope: Scope) -> bool:
    """Plain HTTP where raywatch redirects to HTTPS (RAYWATCH_SSL_REDIRECT): Django's
    SecurityMiddleware answers it, as it answers any other request (uvicorn has already
    applied a trusted proxy's X-Forwarded-Proto to the scheme)."""
    return bool(settings.SECURE_SSL_REDIRECT) and scope.get("scheme") != "https"


def _host_allowed(host: str) -> bool:
    """Django's own ALLOWED_HOSTS check, as a request to any view gets it."""
    request = HttpRequest()
    request.META = {"HTTP_HOST": host, "SERVER_NAME": "", "SERVER_PORT": ""}
    try:
        request.get_host()
    except DisallowedHost:
        return False
    return True


async def _body(receive: Receive, limit: int | None) -> bytes | None:
    """The request's body; None past `limit` bytes (what is left is not read)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)

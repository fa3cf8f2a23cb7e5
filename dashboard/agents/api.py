"""The agent endpoints, /api/agent/v1/ (docs/agent-protocol.md). Token-authenticated
(`Authorization: Bearer rwa_…`), no cookies, so no CSRF; nothing else of the API
accepts a node token. The commands long-poll is async: a waiting agent holds no thread."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, wraps
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, DataError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from collectors.agent import wire
from dashboard.agents import commands, pacing, together, tokens
from dashboard.agents.ingest import BatchRefused, Sent, read_body
from dashboard.agents.models import NodeToken
from dashboard.core import stopping
from dashboard.core.errors import ApiError

log = logging.getLogger("raywatch.agents")
WAIT_MAX_S = 25
RECHECK_S = 2.0  # the long-poll looks at the database this often even without a wake-up
BUSY_RETRY_S = 1
DATABASE_RETRY_S = 5
_in_flight: set[str] = set()  # tokens (their headers) with a report held here
_in_flight_lock = threading.Lock()


@cache
def _report_slots() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(settings.AGENT_REPORT_SLOTS)


def answer(data: dict[str, Any], status: int = 200, retry_after: float | None = None
           ) -> JsonResponse:
    response = JsonResponse({"version": wire.VERSION, **data}, status=status)
    response["Cache-Control"] = "no-store"
    if retry_after is not None:
        response["Retry-After"] = str(int(retry_after))
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="raywatch-agent"'
    return response


def refusal(exc: Exception) -> JsonResponse:
    """The protocol's answer to what went wrong (400/401/403/404/409, 413, 500, 503)."""
    if isinstance(exc, BatchRefused):
        return answer({"detail": exc.message, "seq": exc.seq}, exc.status)
    if isinstance(exc, ApiError):
        return answer({"detail": exc.message}, exc.status,
                      BUSY_RETRY_S if exc.status in (429, 503) else None)
    if isinstance(exc, RequestDataTooBig):
        return answer({"detail": f"at most {wire.MAX_BODY_BYTES} bytes a request"}, 413)
    if isinstance(exc, DataError):  # this report's values, not the database: not 503
        return answer({"detail": f"raywatch cannot store this report: {exc}"}, 400)
    if not isinstance(exc, DatabaseError):  # raywatch's own failure: said, and logged
        log.error("agent request failed", exc_info=exc)
        return answer({"detail": f"raywatch failed on this request ({type(exc).__name__}); "
                                 "retry later"}, 500, DATABASE_RETRY_S)
    log.warning("agent request failed on the database: %s", exc)
    return answer({"detail": "raywatch's database is unavailable; retry later"}, 503,
                  DATABASE_RETRY_S)


def agent_endpoint(view: Callable[..., JsonResponse]) -> Callable[..., HttpResponse]:
    @csrf_exempt
    @wraps(view)
    def wrapper(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        try:
            token = authenticate(request)
            return view(request, token, **kwargs)
        except (ApiError, RequestDataTooBig, DatabaseError) as exc:
            return refusal(exc)
    return wrapper


def authenticate(request: HttpRequest) -> NodeToken:
    return tokens.authenticate(request.headers.get("Authorization"),
                               request.META.get("REMOTE_ADDR", ""), timezone.now())


def json_body(request: HttpRequest) -> Any:
    return read_body(request.body, request.headers.get("Content-Encoding", "identity"))


@require_GET
@agent_endpoint
def hello(request: HttpRequest, token: NodeToken) -> JsonResponse:
    return answer({"node": token.node, "node_ip": token.node_ip or None,
                   "server_time": wire.timestamp(timezone.now()),
                   "report_every_s": settings.POLL_GPU_S, "command_wait_max_s": WAIT_MAX_S,
                   "encodings": ["gzip"]})


@require_POST
@csrf_exempt
async def report(request: HttpRequest) -> HttpResponse:
    """Served by reports.py's route in front of Django under ASGI; this view answers
    what reaches Django itself (a test client, a WSGI server)."""
    try:
        body: bytes | None = request.body
    except RequestDataTooBig:
        body = None
    return await stored(request.headers.get("Authorization"),
                        request.META.get("REMOTE_ADDR", ""), body,
                        request.headers.get("Content-Encoding", "identity"))


async def stored(header: str | None, address: str, body: bytes | None, encoding: str
                 ) -> JsonResponse:
    """The answer to one POST report (`body` None: it was over the size limit). The
    report is authenticated, decoded and stored together with the other agents'
    reports that arrive meanwhile (together.py); answered once stored, with how long the
    agent should gather before its next report (pacing.py). Here, nothing else but the
    request's bounds: one report a token at a time, AGENT_REPORT_SLOTS at once."""
    try:
        if body is None:
            raise RequestDataTooBig("request body too large")
        with _one_at_a_time(header), _slot():
            outcome = await together.store(Sent(header, address, body, encoding,
                                                timezone.now()))
        return answer({**outcome, "send_s": pacing.advice_for(header or "")})
    except Exception as exc:  # every report is answered, in the protocol's JSON
        return refusal(exc)


@contextmanager
def _one_at_a_time(header: str | None) -> Iterator[None]:
    if not header:  # no token: refused 401 in its group, whatever else is in flight
        yield
        return
    with _in_flight_lock:
        if header in _in_flight:
            raise ApiError("this token has a report in flight: one at a time", 429)
        _in_flight.add(header)
    try:
        yield
    finally:
        with _in_flight_lock:
            _in_flight.discard(header)


@contextmanager
def _slot() -> Iterator[None]:
    slots = _report_slots()
    if not slots.acquire(blocking=False):
        raise ApiError("raywatch is storing many reports; retry shortly", 503)
    try:
        yield
    finally:
        slots.release()


@require_POST
@agent_endpoint
def command_result(request: HttpRequest, token: NodeToken, pk: int) -> JsonResponse:
    command = commands.take_result(token, pk, json_body(request), timezone.now())
    return answer({"id": command.pk, "state": command.state, "outcome": command.outcome})


@csrf_exempt
async def pending_commands(request: HttpRequest) -> HttpResponse:
    """GET commands?wait=N: this node's commands, as soon as there is one, else [] after
    N s (at most WAIT_MAX_S)."""
    if request.method != "GET":
        return answer({"detail": "GET only"}, 405)
    try:
        token = await on_pool(authenticate)(request)
        wait = _wait_s(request.GET.get("wait"))
        found = await _wait_for_commands(token, time.monotonic() + wait)
    except (ApiError, DatabaseError) as exc:
        return refusal(exc)
    return answer({"server_time": wire.timestamp(timezone.now()), "commands": found})


def on_pool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (database work) on the shared thread pool, with Django's connection upkeep
    around it. Not on the request's own thread (sync_to_async's default under ASGI):
    that thread would live as long as the long-poll, one per waiting agent."""
    return database_sync_to_async(fn, thread_sensitive=False)


def _wait_s(raw: str | None) -> float:
    try:
        return min(max(float(raw if raw is not None else WAIT_MAX_S), 0.0), WAIT_MAX_S)
    except ValueError:
        raise ApiError("wait: seconds, 0 to 25") from None


async def _wait_for_commands(token: NodeToken, deadline: float) -> list[dict[str, Any]]:
    """Look now, then whenever the node's wake-up group says a command was created (or
    every RECHECK_S: the channel layer may drop a message), until the deadline.

    One receive on the wake-up channel (a new channel for each long-poll), kept across
    the rechecks and cancelled when the long-poll answers. channels_redis's receive()
    assumes one receiver per channel at a time; cancelled at every recheck and started
    again at once, a new receive could begin while the cancelled one still ended (a
    Redis read closing its connection). One of them then deleted the channel's buffer
    under the other, which, cancelled in turn, raised KeyError (a traceback in serve's
    log at a stop) without releasing the layer's receive lock. Kept, the receive also
    costs one Redis read per long-poll instead of a cancelled read, and a closed Redis
    connection, per recheck. The answer does not wait for the cancelled receive to end:
    a stop must not wait on Redis (a cancelled channels_redis read was seen to go on
    reading), and its channel is used no more."""
    layer = get_channel_layer()
    group = commands.wake_group(token.node)
    channel = await layer.new_channel() if layer else None
    if layer and channel:
        await layer.group_add(group, channel)
    wake: asyncio.Future[Any] | None = None
    try:
        while True:
            found = await on_pool(commands.hand_out)(token, timezone.now())
            left = deadline - time.monotonic()
            if found or left <= 0 or stopping.event().is_set():
                return found
            if layer and channel and wake is None:
                wake = asyncio.ensure_future(layer.receive(channel))
            if wake in await _first_of([wake] if wake else [], min(RECHECK_S, left)):
                failed, wake = wake.exception(), None
                if failed:
                    # A wake-up is only a shortcut: the loop looks in the database every
                    # RECHECK_S anyway, so a channel layer error (seen: redis "Timeout
                    # reading") costs the agent nothing but that delay, and must not end
                    # its long-poll with a 500.
                    log.warning("agent commands: the channel layer failed (%s); checking "
                                "the database every %.0f s", failed, RECHECK_S)
                    await _first_of([], min(RECHECK_S, left))
    finally:
        if wake is not None:
            _cancel(wake)
        if layer and channel:
            await layer.group_discard(group, channel)


async def _first_of(tasks: list[asyncio.Future[Any]], timeout: float) -> set[asyncio.Future[Any]]:
    """Wait for the first of `tasks` or the server stopping, at most `timeout`. The ones
    done; `tasks` are the caller's and go on."""
    stop = asyncio.ensure_future(stopping.event().wait())
    try:
        done, _ = await asyncio.wait({*tasks, stop}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    return done


def _cancel(task: asyncio.Future[Any]) -> None:
    """Cancel `task` without waiting for it, and take what it ends with: redis turns a
    cancelled read into a TimeoutError, which, never retrieved, is logged from the
    garbage collector at some random later moment (and mid-way through whatever runs
    then: it broke a test's ast.parse on Python 3.11)."""
    task.add_done_callback(_retrieved)
    task.cancel()


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()

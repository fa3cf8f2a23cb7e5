"""raywatch's own middleware: refusals before any view sees a request, and static files.

Both run sync or async, like Django's own: a middleware that can only run sync makes
Django run everything below it, async views included, on a thread of its own for the
request's whole life, so each agent's commands long-poll (an async view that waits up
to 25 s) would hold a server thread, and a server shutdown would cancel it inside a
thread's event loop ("Future exception was never retrieved").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from whitenoise.middleware import WhiteNoiseMiddleware

NUL = "\x00"
GetResponse = Callable[[HttpRequest], Any]


class _SyncOrAsync:
    """Runs as a sync or an async middleware, whichever Django gives it: `_call` or
    `_acall`. A subclass's __init__ calls `_adapt(get_response)`."""

    sync_capable = True
    async_capable = True

    def _adapt(self, get_response: GetResponse) -> None:
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        return self._acall(request) if self.is_async else self._call(request)

    def _call(self, request: HttpRequest) -> HttpResponse:
        raise NotImplementedError

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        raise NotImplementedError


class RefuseNulInUrl(_SyncOrAsync):
    """A NUL character in the path or a query parameter (`?experiment=%00`) would reach
    Postgres, which cannot hold one in text, and come back as a server error: answer
    400 here instead, once for every page and endpoint."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self._adapt(get_response)

    def _call(self, request: HttpRequest) -> HttpResponse:
        return self.refusal(request) or self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        return self.refusal(request) or await self.get_response(request)

    @staticmethod
    def refusal(request: HttpRequest) -> HttpResponse | None:
        if NUL in request.path or any(
            NUL in name or any(NUL in value for value in values)
            for name, values in request.GET.lists()
        ):
            return JsonResponse({"detail": "The URL contains a NUL character (%00)."},
                                status=400)
        return None


class StaticFiles(_SyncOrAsync, WhiteNoiseMiddleware):
    """WhiteNoise (static files compressed and cached: dashboard/core/staticstorage.py),
    able to run async: its own middleware is sync only. A static file is looked up and
    opened on a worker thread; every other request goes straight on."""

    def __init__(self, get_response: GetResponse, *args: Any, **kwargs: Any) -> None:
        super().__init__(get_response, *args, **kwargs)
        self._adapt(get_response)

    def _call(self, request: HttpRequest) -> HttpResponse:
        return WhiteNoiseMiddleware.__call__(self, request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        if self.autorefresh:  # a checkout (DEBUG or no collectstatic): look on disk
            static_file = await sync_to_async(self.find_file, thread_sensitive=False)(
                request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is None:
            return await self.get_response(request)
        return await sync_to_async(self.serve, thread_sensitive=False)(static_file, request)

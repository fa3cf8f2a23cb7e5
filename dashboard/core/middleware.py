"""Requests raywatch refuses before any view sees them."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

NUL = "\x00"


class RefuseNulInUrl:
    """A NUL character in the path or a query parameter (`?experiment=%00`) would reach
    Postgres, which cannot hold one in text, and come back as a server error: answer
    400 here instead, once for every page and endpoint."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if NUL in request.path or any(
            NUL in name or any(NUL in value for value in values)
            for name, values in request.GET.lists()
        ):
            return JsonResponse({"detail": "The URL contains a NUL character (%00)."},
                                status=400)
        return self.get_response(request)

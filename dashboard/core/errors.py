"""A request refused for a reason the person asking should read, and the one place
the API answers it."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback


class ApiError(Exception):
    """`message` is for the person asking; `status` is the HTTP status that says why
    (400 a bad request, 403 not allowed, 404, 409 the target changed, 429, 503 Ray or
    a node cannot be reached)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """REST_FRAMEWORK's EXCEPTION_HANDLER: an ApiError is answered as DRF answers its own
    errors, {"detail": message} with its status; anything else goes to DRF's handler."""
    if isinstance(exc, ApiError):
        set_rollback()
        return Response({"detail": exc.message}, status=exc.status)
    return drf_exception_handler(exc, context)

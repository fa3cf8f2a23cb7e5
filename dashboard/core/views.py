from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from dashboard.core.health import health_payload
from dashboard.core.roles import VIEWER, has_role


def viewer_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Pages need a login and at least the viewer role."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not has_role(request.user, VIEWER):
            raise PermissionDenied("Your account has no raywatch role yet: ask an admin.")
        return view(request, *args, **kwargs)

    return wrapper


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness for load balancers and compose: no login, no detail beyond states."""
    return JsonResponse({"ok": True})


@viewer_required
def sources(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"sources": health_payload()})

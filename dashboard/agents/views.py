"""The Agents page (admins): every node token with its agent's last report; issue a
token (shown once, on the answer to the POST) or revoke one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from dashboard.agents import tokens
from dashboard.agents.models import NodeToken
from dashboard.core.errors import ApiError
from dashboard.core.roles import ADMIN, has_role
from dashboard.core.views import viewer_required


def _admin(request: HttpRequest) -> None:
    if not has_role(request.user, ADMIN):
        raise PermissionDenied("Node tokens are for admins.")


@viewer_required
def agents_page(request: HttpRequest) -> HttpResponse:
    _admin(request)
    issued: dict[str, Any] | None = None
    if request.method == "POST":
        try:
            row, token = tokens.issue(request.POST.get("node", ""), request.user,
                                      timezone.now(), request.POST.get("node_ip", ""))
            issued = {"row": row, "token": token}
        except ApiError as exc:
            messages.error(request, exc.message)
    response = render(request, "agents/agents.html", {
        "rows": [_row(t) for t in NodeToken.objects.select_related("created_by")[:500]],
        "issued": issued, "url": settings.BASE_URL})
    response["Cache-Control"] = "no-store"  # the page that shows a new token once
    return response


@require_POST
@viewer_required
def revoke(request: HttpRequest, pk: int) -> HttpResponse:
    _admin(request)
    row = get_object_or_404(NodeToken, pk=pk)
    if tokens.revoke(row, request.user, timezone.now()):
        messages.success(request, f"Token {row.prefix}… of node {row.node} is revoked: its "
                                  "agent is refused from its next request.")
    return redirect("agents")


def _row(token: NodeToken) -> dict[str, Any]:
    now = timezone.now()
    if token.revoked_at:
        state = "revoked"
    elif token.last_seen_at is None:
        state = "never seen"
    elif now - token.last_seen_at > timedelta(seconds=settings.AGENT_STALE_S):
        state = "stale"
    else:
        state = "connected"
    return {"obj": token, "state": state}

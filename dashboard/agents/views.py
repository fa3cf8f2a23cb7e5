"""The Agents page (admins): every node token with its agent's last report; issue a
token or rotate one (the new token shown once, on the answer to the POST), or revoke
one."""

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

from dashboard.agents import sealing, tokens
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
            issued = _issue_or_rotate(request)
        except ApiError as exc:
            messages.error(request, exc.message)
    response = render(request, "agents/agents.html", {
        "rows": [_row(t) for t in NodeToken.objects.select_related("created_by")[:500]],
        "issued": issued, "url": settings.BASE_URL,
        "expires_days": f"{settings.AGENT_TOKEN_EXPIRES_DAYS:g}"
        if settings.AGENT_TOKEN_EXPIRES_DAYS else ""})
    response["Cache-Control"] = "no-store"  # the page that shows a new token once
    return response


def _issue_or_rotate(request: HttpRequest) -> dict[str, Any]:
    """A new token: for a node, or (`rotate`: a token's id) in place of a token, which
    keeps working RAYWATCH_AGENT_TOKEN_OVERLAP_S, then stops."""
    days = _days(request.POST.get("expires_days", ""))
    if request.POST.get("rotate"):
        old = get_object_or_404(NodeToken, pk=_whole(request.POST["rotate"]))
        row, token = tokens.rotate(old, request.user, timezone.now(), expires_days=days,
                                   address=_address(request))
        return {"row": row, "token": token, "replaces": old}
    row, token = tokens.issue(request.POST.get("node", ""), request.user, timezone.now(),
                              request.POST.get("node_ip", ""), expires_days=days,
                              address=_address(request))
    return {"row": row, "token": token}


def _address(request: HttpRequest) -> str:
    """Where the request came from, as the audit trail keeps it."""
    return str(request.META.get("REMOTE_ADDR") or "")


def _days(raw: str) -> float | None:
    if not raw.strip():
        return None  # RAYWATCH_AGENT_TOKEN_EXPIRES_DAYS
    try:
        return float(raw)
    except ValueError:
        raise ApiError(f"expires after: a number of days, not {raw[:20]!r}") from None


def _whole(raw: str) -> int:
    if not raw.isdigit():
        raise ApiError("no such token")
    return int(raw)


@require_POST
@viewer_required
def revoke(request: HttpRequest, pk: int) -> HttpResponse:
    _admin(request)
    row = get_object_or_404(NodeToken, pk=pk)
    if tokens.revoke(row, request.user, timezone.now(), address=_address(request)):
        messages.success(request, f"Token {row.prefix}… of node {row.node} is revoked: its "
                                  "agent is refused from its next request.")
    return redirect("agents")


def _row(token: NodeToken) -> dict[str, Any]:
    now = timezone.now()
    if token.revoked_at:
        state = "revoked"
    elif token.expires_at is not None and token.expires_at <= now:
        state = "expired"
    elif token.last_seen_at is None:
        state = "never seen"
    elif now - token.last_seen_at > timedelta(seconds=settings.AGENT_STALE_S):
        state = "stale"
    else:
        state = "connected"
    return {"obj": token, "state": state, "usable": state not in ("revoked", "expired"),
            "commands": sealing.unseal(token.command_key_sealed) is not None}

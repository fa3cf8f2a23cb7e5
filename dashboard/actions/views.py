from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.dateparse import parse_date

from dashboard.actions.models import AuditEntry
from dashboard.cluster.scope import page_cluster
from dashboard.cluster.views_data import jobs_payload
from dashboard.core.roles import OPERATOR, has_role
from dashboard.core.views import viewer_required

FILTERS = ("user", "kind", "state", "target", "since")


@viewer_required
def audit_page(request: HttpRequest) -> HttpResponse:
    """Every action, newest first, with its steps. Read-only by design."""
    chosen = {name: request.GET.get(name, "").strip() for name in FILTERS}
    entries = AuditEntry.objects.prefetch_related("steps")
    if chosen["user"]:
        entries = entries.filter(username=chosen["user"])
    if chosen["kind"]:
        entries = entries.filter(kind=chosen["kind"])
    if chosen["state"]:
        entries = entries.filter(state=chosen["state"])
    if chosen["target"]:
        entries = entries.filter(target_key__icontains=chosen["target"])
    if since := parse_date(chosen["since"] or "x"):
        entries = entries.filter(requested_at__date__gte=since)
    return render(request, "actions/audit.html", {
        "entries": entries[:300], "filters": chosen, "kinds": AuditEntry.KINDS,
        "states": AuditEntry.STATES,
        "users": sorted(set(AuditEntry.objects.values_list("username", flat=True)))})


@viewer_required
def jobs_page(request: HttpRequest) -> HttpResponse:
    """Ray jobs (training runs submitted with `ray job submit`), newest first; operators
    stop a running one through the confirm dialog."""
    scope = page_cluster(request)
    return render(request, "actions/jobs.html", {
        "jobs": jobs_payload(scope.name if scope else None),
        "can_act": has_role(request.user, OPERATOR)})

"""Alerts pages: incidents (live), one incident's timeline, silences, channels."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from dashboard.alerts.forms import ChannelForm, SilenceForm
from dashboard.alerts.models import Channel, Delivery, Silence
from dashboard.alerts.service import ActionError, create_silence, end_silence
from dashboard.alerts.testsend import send_test
from dashboard.alerts.urlguard import mask_url
from dashboard.cluster.models import Cluster
from dashboard.cluster.scope import page_cluster
from dashboard.core.roles import ADMIN, OPERATOR, has_role
from dashboard.core.views import viewer_required
from dashboard.incidents.models import SEVERITIES, Incident


def _require(request: HttpRequest, role: str) -> None:
    if not has_role(request.user, role):
        raise PermissionDenied(f"This needs the {role} role.")


def _distinct(field: str) -> list[str]:
    return list(Incident.objects.exclude(**{field: ""}).order_by(field)
                .values_list(field, flat=True).distinct())


@viewer_required
def alerts_page(request: HttpRequest) -> HttpResponse:
    choices = {  # DISTINCT in the database: months of incidents are not read to list them
        "kinds": _distinct("kind"),
        "experiments": _distinct("experiment"),
        "nodes": _distinct("node_ip"),
        "severities": SEVERITIES,
        "clusters": list(Cluster.objects.order_by("name").values_list("name", flat=True)),
    }
    filters = {k: request.GET.get(k, "") for k in
               ("state", "kind", "severity", "experiment", "node", "group")}
    scope = page_cluster(request)  # the header's switcher; the form can widen it
    filters["cluster"] = scope.name if scope else ""
    return render(request, "alerts/alerts.html", {
        "choices": choices, "filters": filters,
        "can_act": has_role(request.user, OPERATOR)})


@viewer_required
def incident_page(request: HttpRequest, pk: int) -> HttpResponse:
    incident = get_object_or_404(Incident, pk=pk)
    return render(request, "alerts/incident.html", {
        "incident": incident, "can_act": has_role(request.user, OPERATOR)})


@viewer_required
def silences_page(request: HttpRequest) -> HttpResponse:
    form = SilenceForm(request.POST or None, initial={
        k: request.GET.get(k, "") for k in Silence.MATCHERS})
    if request.method == "POST":
        _require(request, OPERATOR)
        if form.is_valid():
            starts, ends = form.window()
            data = form.cleaned_data
            try:
                silence = create_silence(request.user, {m: data[m] for m in Silence.MATCHERS},
                                         starts, ends, data["comment"], timezone.now())
            except ActionError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Silence #{silence.pk} is on until "
                                          f"{silence.ends_at:%Y-%m-%d %H:%M} UTC.")
                return redirect("silences")
    now = timezone.now()
    silences = list(Silence.objects.select_related("created_by")[:200])
    return render(request, "alerts/silences.html", {
        "form": form, "now": now, "can_act": has_role(request.user, OPERATOR),
        "active": [s for s in silences if s.ends_at > now],
        "ended": [s for s in silences if s.ends_at <= now][:50]})


@require_POST
@viewer_required
def silence_end(request: HttpRequest, pk: int) -> HttpResponse:
    _require(request, OPERATOR)
    silence = get_object_or_404(Silence, pk=pk)
    if end_silence(silence, timezone.now()):
        messages.success(request, f"Silence #{silence.pk} ended.")
    return redirect("silences")


@viewer_required
def channels_page(request: HttpRequest) -> HttpResponse:
    form = ChannelForm(request.POST or None)
    if request.method == "POST":
        _require(request, ADMIN)
        if form.is_valid():
            channel = form.save()
            messages.success(request, f"Channel {channel.name} added. Send a test message "
                                      "to check it.")
            return redirect("channel", pk=channel.pk)
    channels = [_row(c) for c in Channel.objects.all()]
    return render(request, "alerts/channels.html", {
        "channels": channels, "form": form, "is_admin": has_role(request.user, ADMIN)})


@viewer_required
def channel_page(request: HttpRequest, pk: int) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=pk)
    form = ChannelForm(request.POST or None, instance=channel)
    if request.method == "POST":
        _require(request, ADMIN)
        if form.is_valid():
            form.save()
            messages.success(request, f"Channel {channel.name} saved.")
            return redirect("channel", pk=channel.pk)
    deliveries = Delivery.objects.filter(channel=channel)[:30]
    return render(request, "alerts/channel.html", {
        "channel": _row(channel), "form": form, "deliveries": deliveries,
        "is_admin": has_role(request.user, ADMIN)})


@require_POST
@viewer_required
def channel_test(request: HttpRequest, pk: int) -> HttpResponse:
    _require(request, ADMIN)
    channel = get_object_or_404(Channel, pk=pk)
    ok, said = send_test(channel, request.user.get_username())
    (messages.success if ok else messages.error)(request, said)
    return redirect("channel", pk=channel.pk)


@require_POST
@viewer_required
def channel_delete(request: HttpRequest, pk: int) -> HttpResponse:
    _require(request, ADMIN)
    channel = get_object_or_404(Channel, pk=pk)
    channel.delete()
    messages.success(request, f"Channel {channel.name} deleted.")
    return redirect("channels")


def _row(channel: Channel) -> dict[str, Any]:
    return {"obj": channel, "url": mask_url(channel.url), "has_secret": bool(channel.secret),
            "pending": channel.deliveries.filter(state__in=[Delivery.PENDING,
                                                            Delivery.SENDING]).count()}

"""An incident that no notification channel carried says so, and why: no channel at
all, every channel disabled, or none that takes its kind and severity. Once a message
carries it, or a silence holds it, or a channel will carry it, it says nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.alerts.models import Silence
from tests.alerting import Detector, route, webhook
from tests.conftest import token_client

pytestmark = pytest.mark.django_db


def told(viewer, incident_id: int) -> tuple[str | None, str | None]:  # type: ignore[no-untyped-def]
    """What the list and the incident's own endpoint say."""
    api = token_client(viewer)
    [listed] = [i for i in api.get("/api/alerts/").json() if i["id"] == incident_id]
    return listed["nobody_told"], api.get(f"/api/alerts/{incident_id}/").json()["nobody_told"]


def test_no_channel_at_all(viewer) -> None:  # type: ignore[no-untyped-def]
    detector = Detector()
    detector.find("trial:mnist/t_1", severity="critical", experiment="mnist")
    route(timezone.now() + timedelta(minutes=1))
    incident = detector.incident("trial:mnist/t_1")
    assert told(viewer, incident.pk) == ("no channel configured: nobody was told",) * 2


def test_every_channel_disabled(viewer) -> None:  # type: ignore[no-untyped-def]
    webhook("https://hooks.example.org/a", disabled=True, disabled_reason="HTTP 404")
    detector = Detector()
    detector.find("trial:mnist/t_1")
    assert told(viewer, detector.incident("trial:mnist/t_1").pk) == (
        "every channel is disabled: nobody was told",) * 2


def test_no_channel_takes_its_kind_or_severity(viewer, alert_settings) -> None:  # type: ignore[no-untyped-def]
    webhook("https://hooks.example.org/a", name="critical-only", min_severity="critical")
    webhook("https://hooks.example.org/b", name="gpus", kinds=["gpu_*"])
    detector = Detector()
    detector.find("trial:mnist/t_1", severity="warning")
    route(timezone.now() + timedelta(minutes=1))
    incident = detector.incident("trial:mnist/t_1")
    assert not incident.deliveries.exists()
    assert told(viewer, incident.pk) == (
        "no channel takes warning test_stalled: nobody was told",) * 2


def test_said_nothing_once_carried_or_on_its_way(viewer, alert_settings) -> None:  # type: ignore[no-untyped-def]
    webhook("https://hooks.example.org/a")
    detector = Detector()
    detector.find("trial:mnist/t_1", severity="critical", experiment="mnist")
    incident = detector.incident("trial:mnist/t_1")
    assert told(viewer, incident.pk) == (None, None)  # its group's message is still to come
    [delivery] = route(timezone.now() + timedelta(minutes=1))
    assert list(delivery.incidents.all()) == [incident]
    delivery.channel.disabled = True  # the message went out; the channel broke later
    delivery.channel.save()
    assert told(viewer, incident.pk) == (None, None)


def test_a_silenced_incident_is_not_called_untold(viewer, admin) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    Silence.objects.create(kind="test_*", starts_at=now, ends_at=now + timedelta(hours=1),
                           created_by=admin, comment="maintenance")
    detector = Detector()
    detector.find("trial:mnist/t_1")
    assert told(viewer, detector.incident("trial:mnist/t_1").pk) == (None, None)

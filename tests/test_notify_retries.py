"""Delivery that loses nothing: retries after errors and timeouts, a gone webhook
disables its channel and says why, and the URL (a credential) is never logged."""

from __future__ import annotations

import logging

import pytest

from dashboard.alerts.models import Channel, Delivery
from tests.alerting import Detector, route, send_all, webhook
from tests.conftest import wait_for

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def deliver_until_done(delivery_id: int) -> Delivery:
    """Run the senders the way the periodic tick does, until the delivery settles."""
    def settled() -> Delivery | None:
        send_all()
        d = Delivery.objects.get(pk=delivery_id)
        return d if d.state in (Delivery.SENT, Delivery.FAILED) else None
    return wait_for(settled, 30, 0.05, "the delivery to be sent or given up")  # type: ignore[return-value]


def test_a_500_and_a_timeout_are_retried_until_delivered(alert_settings, receivers) -> None:  # type: ignore[no-untyped-def]
    receiver = receivers(500, ("sleep", 3, 200), 200)  # the second answer comes too late
    webhook(receiver.url)
    Detector().find("trial:e/t1", experiment="e")
    [made] = route()
    sent = deliver_until_done(made.pk)
    assert sent.state == Delivery.SENT and sent.attempts == 3
    bodies = receiver.bodies()
    assert len(bodies) == 3 and bodies[0] == bodies[1] == bodies[2]  # the same message each time
    channel = Channel.objects.get()
    assert channel.last_delivery_at and not channel.last_error and not channel.disabled


def test_retries_are_capped_and_the_error_kept(alert_settings, receivers) -> None:  # type: ignore[no-untyped-def]
    alert_settings.NOTIFY_MAX_ATTEMPTS = 3
    receiver = receivers(503)
    webhook(receiver.url)
    Detector().find("trial:e/t1", experiment="e")
    [made] = route()
    failed = deliver_until_done(made.pk)
    assert failed.state == Delivery.FAILED and failed.attempts == 3
    assert failed.last_error.startswith("gave up after 3 tries: HTTP 503")
    assert len(receiver.requests) == 3
    channel = Channel.objects.get()
    assert "HTTP 503" in channel.last_error and not channel.disabled


def test_a_404_disables_the_channel_and_says_why(alert_settings, receivers, caplog) -> None:  # type: ignore[no-untyped-def]
    receiver = receivers(404)
    secret_url = receiver.url + "/T000/B000/XXXXtokenXXXX"
    webhook(secret_url, name="gone")
    detector = Detector()
    detector.find("trial:e/t1", experiment="e")
    with caplog.at_level(logging.DEBUG):
        [made] = route()
        failed = deliver_until_done(made.pk)
    assert failed.state == Delivery.FAILED and failed.attempts == 1
    channel = Channel.objects.get()
    assert channel.disabled
    assert "HTTP 404" in channel.disabled_reason and "gone" in channel.disabled_reason
    assert "XXXXtokenXXXX" not in caplog.text  # the URL is a credential
    # A disabled channel gets nothing more, and nothing piles up for it.
    detector.find("trial:e/t2", experiment="e")
    assert route() == [] and send_all() == 0
    assert len(receiver.requests) == 1


def test_an_address_that_is_not_allowed_disables_the_channel(alert_settings, receivers) -> None:  # type: ignore[no-untyped-def]
    receiver = receivers(200)
    webhook(receiver.url)
    alert_settings.WEBHOOK_ALLOW_PRIVATE = False  # loopback is refused at connect time
    Detector().find("trial:e/t1", experiment="e")
    [made] = route()
    failed = deliver_until_done(made.pk)
    assert failed.state == Delivery.FAILED and receiver.requests == []
    channel = Channel.objects.get()
    assert channel.disabled and "RAYWATCH_WEBHOOK_ALLOW_PRIVATE" in channel.disabled_reason

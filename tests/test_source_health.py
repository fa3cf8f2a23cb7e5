"""Each source records its last success, last error and poll time; a failing source
shows the reason, keeps being retried and turns healthy again by itself."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from collectors.localray import free_port
from dashboard.cluster.tasks import poll_ray_state
from dashboard.core.health import effective_state
from dashboard.core.models import SourceHealth
from tests.conftest import PASSWORD

pytestmark = pytest.mark.both_backends


def ray_health() -> SourceHealth:
    return SourceHealth.objects.get(source="ray", scope="")


def test_unreachable_ray_address_is_reported_then_down(db: None, settings) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"
    settings.RAY_API_SERVER_ADDRESS = None
    poll_ray_state()
    row = ray_health()
    assert row.state == "down"  # never succeeded
    assert "cannot reach" in row.last_error and "connection refused" in row.last_error
    assert row.last_duration_ms is not None
    for _ in range(3):
        poll_ray_state()
    assert ray_health().consecutive_failures == 4


def test_no_cluster_configured_says_what_to_set(db: None, settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = None
    settings.LOCAL_RAY_FILE = tmp_path / "absent.json"
    poll_ray_state()
    assert "set RAY_ADDRESS" in ray_health().last_error


def test_client_address_form_is_explained(db: None, settings) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_ADDRESS = "ray://head:10001"
    settings.RAY_API_SERVER_ADDRESS = None
    poll_ray_state()
    assert "not a ray:// client address" in ray_health().last_error


@pytest.mark.ray
def test_wrong_token_is_reported(db: None, ray_settings, settings) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_AUTH_TOKEN = "not-the-token"
    poll_ray_state()
    row = ray_health()
    assert row.state == "down"
    assert "token raywatch sent was rejected" in row.last_error


@pytest.mark.ray
def test_failure_after_success_degrades_then_recovers(db: None, ray_settings, settings) -> None:  # type: ignore[no-untyped-def]
    poll_ray_state()
    assert ray_health().last_success_at is not None
    good = settings.RAY_API_SERVER_ADDRESS
    settings.RAY_API_SERVER_ADDRESS = f"http://127.0.0.1:{free_port()}"
    poll_ray_state()
    assert ray_health().state == "degraded"
    poll_ray_state()
    poll_ray_state()
    assert ray_health().state == "down"
    settings.RAY_API_SERVER_ADDRESS = good
    poll_ray_state()
    row = ray_health()
    assert row.state in ("healthy", "degraded") and row.consecutive_failures == 0


def test_a_poller_that_stopped_counts_as_down(db: None) -> None:
    row = SourceHealth.objects.create(source="ray", state="healthy", interval_s=2,
                                      last_attempt_at=timezone.now(),
                                      last_success_at=timezone.now())
    assert effective_state(row, timezone.now())[0] == "healthy"
    with time_machine.travel(timezone.now() + timedelta(minutes=2)):
        state, reason = effective_state(row, timezone.now())
    assert state == "down" and "scheduler" in reason


def test_status_strip_shows_each_source_and_reason(viewer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"
    settings.RAY_API_SERVER_ADDRESS = None
    poll_ray_state()
    client = Client()
    client.login(username=viewer.username, password=PASSWORD)
    html = client.get("/cluster/").content.decode()
    assert 'data-source="ray"' in html and "state-down" in html
    assert "connection refused" in html
    for source in ("nvml", "trial_logs"):
        assert f'data-source="{source}"' in html

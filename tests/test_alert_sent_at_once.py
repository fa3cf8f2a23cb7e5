"""An incident reaches its chat channel at once, not at the next alert tick: the
incidents app signals once its transaction commits and the alerts app, subscribed
in its AppConfig.ready(), starts its router. No tick runs in these tests, so only
that kick can deliver the message."""

from __future__ import annotations

import os
import signal

import pytest

from dashboard.celery import app as celery_app
from tests.alerting import Detector, start_worker, webhook
from tests.conftest import wait_for
from tests.patience import patient

pytestmark = pytest.mark.django_db(transaction=True)  # the kick follows a real commit


def test_on_the_embedded_default_an_incident_is_sent_without_a_tick(  # type: ignore[no-untyped-def]
        alert_settings, receivers) -> None:
    alert_settings.EMBEDDED = True  # routing and sending in this process's thread pool
    receiver = receivers(200)
    webhook(receiver.url)
    Detector().find("trial:exp1/t1", experiment="exp1")
    wait_for(receiver.accepted, 15, 0.05, "the message, with no tick running")
    assert [b["group"]["key"] for b in receiver.accepted()] == ["experiment:exp1"]


def test_with_celery_an_incident_is_sent_by_the_workers_without_beat(  # type: ignore[no-untyped-def]
        alert_settings, receivers, tmp_path) -> None:
    receiver = receivers(200)
    webhook(receiver.url)
    queues = f"{celery_app.conf.task_default_queue},{alert_settings.NOTIFY_QUEUE}"
    worker = start_worker(queues, tmp_path)
    try:
        wait_for(lambda: celery_app.control.ping(timeout=0.5), 60, 0.5, "the worker to start")
        Detector().find("trial:exp1/t1", experiment="exp1")
        wait_for(receiver.accepted, 30, 0.1, "the message, with no beat running")
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(patient(30))
    assert [b["group"]["key"] for b in receiver.accepted()] == ["experiment:exp1"]


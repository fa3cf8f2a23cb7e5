"""Delivery through real Celery workers: a worker killed mid-delivery loses nothing
and sends nothing twice; a webhook that hangs delays no other channel and no
detector."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from dashboard.alerts import tasks
from dashboard.alerts.models import Delivery
from tests.alerting import Detector, start_worker, webhook
from tests.conftest import wait_for
from tests.patience import patient

pytestmark = pytest.mark.django_db(transaction=True)  # the worker reads what we commit


@pytest.fixture
def notify_worker(alert_settings, tmp_path) -> Iterator[Callable[[], subprocess.Popen]]:  # type: ignore[no-untyped-def]
    """Starts `celery worker -Q notify` as production runs it (threads pool)."""
    started: list[subprocess.Popen] = []
    alert_settings.NOTIFY_TIMEOUT_S = 2.0  # the worker's claim TTL is the one computed here

    def start() -> subprocess.Popen:
        started.append(start_worker(alert_settings.NOTIFY_QUEUE, tmp_path))
        return started[-1]

    yield start
    for worker in started:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(patient(30))


def tick() -> None:
    """What beat does every second: route, and start senders for due deliveries."""
    tasks.route_alerts()


def states() -> list[str]:
    return sorted(Delivery.objects.values_list("state", flat=True))


def test_a_worker_killed_mid_delivery_sends_everything_exactly_once(  # type: ignore[no-untyped-def]
        notify_worker, receivers) -> None:
    receiver = receivers("hang", 200)  # the first request never gets an answer
    webhook(receiver.url)
    detector = Detector()
    for n in range(3):  # three experiments: three messages
        detector.find(f"trial:exp{n}/t1", experiment=f"exp{n}")
    first = notify_worker()
    tick()
    wait_for(lambda: receiver.requests, 60, 0.1, "the worker to start posting")
    os.killpg(first.pid, signal.SIGKILL)  # mid-delivery: the request is in flight
    first.wait(patient(10))
    receiver.release()
    assert Delivery.objects.filter(state=Delivery.SENDING).count() == 1
    notify_worker()

    def all_sent() -> bool:
        tick()
        return states() == [Delivery.SENT] * 3
    wait_for(all_sent, 90, 0.5, "the restarted worker to send everything", explain=states)
    accepted = Counter(body["id"] for body in receiver.accepted())
    assert accepted == Counter({str(d.pk): 1 for d in Delivery.objects.all()})
    # The interrupted one was sent again (its id lets a receiver drop a half-received copy).
    assert sorted(Delivery.objects.values_list("attempts", flat=True)) == [1, 1, 2]


def test_a_hanging_webhook_delays_no_other_channel(notify_worker, receivers) -> None:  # type: ignore[no-untyped-def]
    dead, alive = receivers("hang"), receivers(200)
    webhook(dead.url, name="dead")
    webhook(alive.url, name="alive")
    notify_worker()
    detector = Detector()
    detector.find("trial:exp1/t1", experiment="exp1")
    tick()
    wait_for(lambda: dead.requests and alive.requests, 60, 0.1, "both channels to be posted")
    # While the dead endpoint still holds its request, a detector opens another incident
    # and the healthy channel gets that too.
    detector.find("trial:exp2/t1", experiment="exp2")
    tick()
    wait_for(lambda: len(alive.accepted()) == 2, 30, 0.1, "the healthy channel's second message")
    assert any(r.answered is None for r in dead.requests)  # still hanging meanwhile
    assert [b["group"]["key"] for b in alive.accepted()] == ["experiment:exp1", "experiment:exp2"]
    dead.release()

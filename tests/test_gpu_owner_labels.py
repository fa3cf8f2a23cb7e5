"""A GPU process held by a Ray worker that is no actor nor job driver is labelled as a
person says it ("Ray worker", "Ray driver", "Ray spill worker"): the GPU wall and the
detectors' summaries read "Ray worker worker" for Ray's plain workers."""

from __future__ import annotations

import pytest
from django.utils import timezone

from dashboard.cluster.models import Node, Worker
from dashboard.gpus.owners import owners_on_hosts
from tests.conftest import mark_ray_current

pytestmark = pytest.mark.django_db


def test_ray_workers_are_named_by_their_type() -> None:
    Node.objects.create(node_id="n1", node_ip="10.1.0.1", state="ALIVE",
                        last_seen_at=timezone.now())
    for pid, kind in ((101, "WORKER"), (102, "DRIVER"), (103, "SPILL_WORKER")):
        Worker.objects.create(worker_id=f"w{pid}", node_id="n1", pid=pid, worker_type=kind)
    mark_ray_current()
    owners = owners_on_hosts({"10.1.0.1": {101: [], 102: [], 103: []}}, timezone.now())
    assert {pid: (o.kind, o.label) for pid, o in owners["10.1.0.1"].items()} == {
        101: ("worker", "Ray worker"), 102: ("worker", "Ray driver"),
        103: ("worker", "Ray spill worker")}

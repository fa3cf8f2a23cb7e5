"""A bare cluster: when Ray lists no workers (or actors, jobs, placement groups), the
Ray poll still stores that, and rows of what Ray no longer lists go. Runs on both
backends (see test_on_embedded_default.py)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from dashboard.cluster.models import PlacementGroup, Worker
from dashboard.cluster.workload import (
    ingest_actors,
    ingest_jobs,
    ingest_placement_groups,
    ingest_workers,
)

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def test_no_workers_listed_empties_the_workers() -> None:
    Worker.objects.create(worker_id="w1", node_id="n1", pid=123, worker_type="WORKER")
    now = timezone.now()
    ingest_workers([], now)
    assert not Worker.objects.exists()
    ingest_workers([], now)  # and again on the next poll of the still-bare cluster
    assert not Worker.objects.exists()


def test_a_fresh_raywatch_on_a_bare_cluster_stores_nothing() -> None:
    now = timezone.now()
    for ingest in (ingest_actors, ingest_workers, ingest_jobs, ingest_placement_groups):
        ingest([], now)
    assert not Worker.objects.exists() and not PlacementGroup.objects.exists()

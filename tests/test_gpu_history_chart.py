"""A GPU's history chart has one point per time bucket, dated where the bucket starts,
from raw samples and from per-minute rollups alike. Runs on both backends (see
test_on_embedded_default.py): the buckets are computed in the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from dashboard.gpus.models import Gpu, GpuSample
from dashboard.gpus.retention import roll_up
from tests.conftest import token_client

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def recorded_gpu(start: datetime, minutes: int) -> Gpu:
    """A GPU sampled every 5 s; utilization is the minute's number (0, 1, 2, ...)."""
    gpu = Gpu.objects.create(uuid="GPU-h", node="n1", node_ip="10.0.0.5", index=0,
                             first_seen_at=start, at=start)
    GpuSample.objects.bulk_create(
        GpuSample(gpu=gpu, at=start + timedelta(seconds=s), utilization_gpu=s // 60,
                  memory_used_bytes=2**30, temperature_c=60, power_w=200)
        for s in range(0, minutes * 60, 5))
    return gpu


def whole_hour_ago() -> datetime:
    now = timezone.now().timestamp()
    return datetime.fromtimestamp(now // 3600 * 3600 - 3600, tz=UTC)


def chart(viewer, start: datetime, minutes: int, points: int) -> dict:  # type: ignore[no-untyped-def]
    reply = token_client(viewer).get("/api/gpus/GPU-h/samples/", {
        "since": start.isoformat(), "until": (start + timedelta(minutes=minutes)).isoformat(),
        "points": points})
    assert reply.status_code == 200, reply.content
    return reply.json()


def test_raw_samples_fall_into_their_buckets(viewer) -> None:  # type: ignore[no-untyped-def]
    start = whole_hour_ago()
    recorded_gpu(start, 10)
    body = chart(viewer, start, 10, 21)  # 30 s buckets, read from raw samples
    assert body["bucket_s"] == 30 and body["source"] == "raw"
    times = [datetime.fromisoformat(t) for t in body["series"]["t"]]
    assert times == [start + timedelta(seconds=30 * i) for i in range(20)]
    assert body["series"]["utilization"] == [float(i // 2) for i in range(20)]


def test_rollups_fall_into_their_buckets(viewer) -> None:  # type: ignore[no-untyped-def]
    start = whole_hour_ago()
    recorded_gpu(start, 60)
    roll_up(start + timedelta(minutes=61))
    body = chart(viewer, start, 60, 13)  # 5 min buckets, read from per-minute rollups
    assert body["bucket_s"] == 300 and body["source"] == "rollup"
    times = [datetime.fromisoformat(t) for t in body["series"]["t"]]
    assert times == [start + timedelta(minutes=5 * i) for i in range(12)]
    assert body["series"]["utilization"] == [5 * i + 2.0 for i in range(12)]
    assert body["series"]["utilization_max"] == [5 * i + 4.0 for i in range(12)]

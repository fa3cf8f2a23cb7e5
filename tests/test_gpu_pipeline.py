"""From NVML to the API, with the fake pynvml at the NVML source's boundary: what an
operator reads in GET /api/gpus/, how NVML failures show in the status strip, and
the history behind the charts (rollups, retention, downsampling)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from collectors.records import GpuPoll, GpuProcessRecord, GpuSampleRecord
from dashboard.core.models import SourceHealth
from dashboard.gpus.ingest import ingest_gpu_poll, ingest_gpu_polls
from dashboard.gpus.models import Gpu, GpuProcess, GpuRollup, GpuSample
from dashboard.gpus.retention import prune, roll_up
from tests.agents import report_gpus

GIB = 1024**3
pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def api(user, path: str):  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(user)
    return client.get(path)


def nvml_health() -> SourceHealth:
    return SourceHealth.objects.get(source="nvml", scope="gpu-node-1")


def test_gpu_reading_reaches_the_api(fake_gpus, viewer) -> None:  # type: ignore[no-untyped-def]
    fake_gpus.add_gpu(uuid="GPU-aaa", util=87, mem_used=70 * GIB, mem_total=80 * GIB, temp=71,
                      power_mw=312_500, processes=[(4242, 69 * GIB)])
    fake_gpus.add_gpu(uuid="GPU-bbb", util=0, unsupported={"power", "temperature"})
    report_gpus()
    gpus = {g["uuid"]: g for g in api(viewer, "/api/gpus/").json()}
    busy, bare = gpus["GPU-aaa"], gpus["GPU-bbb"]
    assert (busy["node"], busy["node_ip"], busy["index"]) == ("gpu-node-1", "10.0.0.5", 0)
    assert busy["name"] == "NVIDIA A100-SXM4-80GB"
    assert busy["utilization"] == 87
    assert (busy["memory_used"], busy["memory_total"]) == (70 * GIB, 80 * GIB)
    assert (busy["temperature"], busy["power"]) == (71, 312.5)
    assert busy["simulated"] is False
    [proc] = busy["processes"]
    assert (proc["pid"], proc["used_memory"]) == (4242, 69 * GIB)
    # Ray's view is not current in this test: nobody can say who owns pid 4242.
    assert proc["owner"]["kind"] == "unknown"
    assert bare["power"] is None and bare["temperature"] is None  # unsupported: None, not 0
    assert bare["processes"] == []
    assert nvml_health().state == SourceHealth.HEALTHY


@pytest.mark.parametrize(("error", "reason"), [
    ("LibraryNotFound", "no NVIDIA driver"),
    ("DriverNotLoaded", "driver"),
    ("NoPermission", "may not open"),
])
def test_nvml_failure_is_shown_and_polling_goes_on(fake_gpus, error, reason) -> None:  # type: ignore[no-untyped-def]
    fake_gpus.add_gpu(uuid="GPU-aaa", util=50)
    fake_gpus.set_init_error(error)
    report_gpus()
    report_gpus()
    health = nvml_health()
    assert health.state == SourceHealth.DOWN
    assert reason in health.last_error
    assert not Gpu.objects.exists()
    fake_gpus.set_init_error(None)
    report_gpus()
    assert nvml_health().state == SourceHealth.HEALTHY
    assert Gpu.objects.get().utilization_gpu == 50


def test_lost_gpu_degrades_the_source_and_the_others_still_report(fake_gpus) -> None:  # type: ignore[no-untyped-def]
    fake_gpus.add_gpu(uuid="GPU-aaa", util=10)
    fake_gpus.add_gpu(uuid="GPU-bbb", util=20, lost=True)
    report_gpus()
    health = nvml_health()
    assert health.state == SourceHealth.DEGRADED
    assert "lost" in health.last_error
    assert list(Gpu.objects.values_list("uuid", flat=True)) == ["GPU-aaa"]


def test_field_error_degrades_but_keeps_the_rest(fake_gpus) -> None:  # type: ignore[no-untyped-def]
    fake_gpus.add_gpu(uuid="GPU-aaa", util=33, temp=60, errors={"power": "Unknown"})
    report_gpus()
    gpu = Gpu.objects.get()
    assert (gpu.utilization_gpu, gpu.temperature_c, gpu.power_w) == (33, 60, None)
    assert nvml_health().state == SourceHealth.DEGRADED
    assert "power" in nvml_health().last_error


def test_processes_that_exit_leave_the_table(fake_gpus, viewer) -> None:  # type: ignore[no-untyped-def]
    fake_gpus.add_gpu(uuid="GPU-aaa", processes=[(11, GIB), (12, 2 * GIB)])
    report_gpus()
    fake_gpus.set_gpu(0, processes=[(12, 3 * GIB)])
    report_gpus()
    [gpu] = api(viewer, "/api/gpus/").json()
    assert [(p["pid"], p["used_memory"]) for p in gpu["processes"]] == [(12, 3 * GIB)]


def _samples(gpu: Gpu, start: datetime, seconds: int, util) -> None:  # type: ignore[no-untyped-def]
    GpuSample.objects.bulk_create(
        GpuSample(gpu=gpu, at=start + timedelta(seconds=s), utilization_gpu=util(s),
                  memory_used_bytes=s * 1000, temperature_c=40.0, power_w=100.0)
        for s in range(seconds)
    )


def _gpu(uuid: str = "GPU-hist") -> Gpu:
    now = timezone.now()
    return Gpu.objects.create(uuid=uuid, node="n", node_ip="10.0.0.9", index=0,
                              first_seen_at=now, at=now)


def test_rollup_keeps_min_mean_max_per_minute() -> None:
    gpu = _gpu()
    start = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
    _samples(gpu, start, 180, lambda s: float(s % 60))  # 0..59 in each minute
    roll_up(start + timedelta(minutes=10))
    rows = list(GpuRollup.objects.filter(gpu=gpu).order_by("minute"))
    assert [r.minute for r in rows] == [start + timedelta(minutes=m) for m in range(3)]
    assert all((r.samples, r.utilization_min, r.utilization_max) == (60, 0, 59) for r in rows)
    assert rows[0].utilization_mean == pytest.approx(29.5)
    assert rows[1].memory_max == 119_000


def test_retention_deletes_only_rolled_up_old_rows(settings) -> None:  # type: ignore[no-untyped-def]
    settings.RAW_RETENTION_H = 1
    settings.ROLLUP_RETENTION_D = 1
    settings.RETENTION_BATCH = 50  # several batches, as on a real table
    gpu = _gpu()
    now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    _samples(gpu, now - timedelta(days=2), 120, lambda s: 50.0)  # beyond both retentions
    _samples(gpu, now - timedelta(hours=3), 120, lambda s: 60.0)  # raw expired, rollup kept
    _samples(gpu, now - timedelta(minutes=5), 120, lambda s: 70.0)  # fresh
    roll_up(now)
    deleted = prune(now)
    assert deleted == {"samples": 240, "rollups": 2}
    assert GpuSample.objects.count() == 120
    assert GpuRollup.objects.filter(minute__lt=now - timedelta(days=1)).count() == 0
    assert GpuRollup.objects.filter(minute__lt=now - timedelta(hours=1)).count() == 2


def test_unrolled_rows_are_never_pruned(settings) -> None:  # type: ignore[no-untyped-def]
    settings.RAW_RETENTION_H = 1
    gpu = _gpu()
    now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    _samples(gpu, now - timedelta(hours=3), 60, lambda s: 1.0)
    assert prune(now)["samples"] == 0  # no rollup has run: deleting would lose history


def test_week_chart_is_downsampled_from_rollups(viewer) -> None:  # type: ignore[no-untyped-def]
    gpu = _gpu()
    now = timezone.now().replace(second=0, microsecond=0)
    start = now - timedelta(days=7)
    # One sample a minute for a week, then the last ten minutes at 1 Hz.
    GpuSample.objects.bulk_create(
        GpuSample(gpu=gpu, at=start + timedelta(minutes=m), utilization_gpu=float(m % 100))
        for m in range(7 * 24 * 60 - 10)
    )
    roll_up(now - timedelta(minutes=10))
    _samples(gpu, now - timedelta(minutes=10), 600, lambda s: 100.0)
    reply = api(viewer, f"/api/gpus/{gpu.uuid}/samples/?since=-7d&points=2000").json()
    assert reply["source"] == "rollup"
    assert 1000 < reply["points"] <= 2000
    series = reply["series"]
    assert len(series["t"]) == len(series["utilization"]) == reply["points"]
    assert max(series["utilization_max"]) == 100  # the raw tail after the last rollup is in
    assert min(series["utilization_min"]) == 0
    hour = api(viewer, f"/api/gpus/{gpu.uuid}/samples/?since=-5m").json()
    assert hour["source"] == "raw" and hour["bucket_s"] == 1
    assert set(hour["series"]["utilization"]) == {100.0}


@pytest.mark.parametrize(("query", "field"), [
    ("since=yesterday", "since"),
    ("since=-1h&until=-2h", "since"),
    ("points=0", "points"),
    ("points=5000", "points"),
    ("points=ten", "points"),
])
def test_bad_chart_query_is_refused_clearly(viewer, query, field) -> None:  # type: ignore[no-untyped-def]
    gpu = _gpu()
    reply = api(viewer, f"/api/gpus/{gpu.uuid}/samples/?{query}")
    assert reply.status_code == 400
    assert field in reply.json()


def test_unknown_gpu_is_404(viewer) -> None:  # type: ignore[no-untyped-def]
    assert api(viewer, "/api/gpus/GPU-nope/samples/").status_code == 404


def test_simulated_source_is_marked_simulated(viewer) -> None:  # type: ignore[no-untyped-def]
    from collectors import simnvml
    from collectors.nvml import shutdown_nvml

    report_gpus("demo-node", simulated=True)  # an agent with RAYWATCH_GPU_SOURCE=simulated
    shutdown_nvml(simnvml)
    gpus = api(viewer, "/api/gpus/").json()
    assert gpus and all(g["simulated"] for g in gpus)
    uuid = gpus[0]["uuid"]
    assert api(viewer, f"/api/gpus/{uuid}/samples/?since=-5m").json()["simulated"] is True


def test_ingest_records_when_utilization_went_idle(settings) -> None:  # type: ignore[no-untyped-def]
    settings.IDLE_GPU_PERCENT = 5
    t0 = timezone.now()

    def poll(at: datetime, util: float) -> Gpu:
        record = GpuSampleRecord(node="n1", gpu_index=0, uuid="GPU-idle", at=at,
                                 utilization_gpu=util)
        [gpu] = ingest_gpu_poll(GpuPoll(node="n1", at=at, gpus=(record,)), "10.0.0.1", at)
        return gpu

    assert poll(t0, 90).idle_since is None
    assert poll(t0 + timedelta(seconds=1), 2).idle_since == t0 + timedelta(seconds=1)
    assert poll(t0 + timedelta(seconds=2), 0).idle_since == t0 + timedelta(seconds=1)
    assert poll(t0 + timedelta(seconds=3), 40).idle_since is None


def test_many_nodes_polls_in_one_write(settings) -> None:  # type: ignore[no-untyped-def]
    """Three nodes' polls, two of one node, stored by one call (an agent's report that
    carries several polls; the write of many agents at once): every sample kept once, each
    GPU's reading its newest, an idle stretch begun in the older poll carried into the
    newer, and a node's processes those of its newest poll."""
    settings.IDLE_GPU_PERCENT = 5
    t0 = timezone.now()

    def poll(node: str, at: datetime, util: float, pids: tuple[int, ...]) -> GpuPoll:
        records = tuple(GpuSampleRecord(
            node=node, gpu_index=i, uuid=f"GPU-{node}-{i}", at=at, utilization_gpu=util,
            processes=tuple(GpuProcessRecord(pid=pid + i, used_memory_bytes=GIB)
                            for pid in pids)) for i in range(2))
        return GpuPoll(node=node, at=at, gpus=records)

    later = t0 + timedelta(seconds=1)
    # given newest first on purpose: the call orders them by time
    stored = ingest_gpu_polls([(poll("a", later, 1, (900,)), "10.0.0.1"),
                               (poll("a", t0, 0, (800,)), "10.0.0.1"),
                               (poll("b", t0, 70, (700,)), "10.0.0.2"),
                               (poll("c", t0, 50, ()), "10.0.0.3")], later)
    assert [(g.node, g.index) for g in stored] == [(n, i) for n in "abc" for i in range(2)]
    assert GpuSample.objects.count() == 8
    a0 = Gpu.objects.get(uuid="GPU-a-0")
    assert (a0.at, a0.utilization_gpu, a0.idle_since) == (later, 1, t0)
    assert Gpu.objects.get(uuid="GPU-b-1").idle_since is None
    assert sorted(GpuProcess.objects.filter(gpu__node="a").values_list("pid", flat=True)) == [
        900, 901]
    assert sorted(GpuProcess.objects.filter(gpu__node="b").values_list("pid", flat=True)) == [
        700, 701]
    # The next write of node a lists no process: its processes leave, b's stay.
    ingest_gpu_polls([(poll("a", later + timedelta(seconds=1), 1, ()), "10.0.0.1")], later)
    assert not GpuProcess.objects.filter(gpu__node="a").exists()
    assert GpuProcess.objects.filter(gpu__node="b").count() == 2

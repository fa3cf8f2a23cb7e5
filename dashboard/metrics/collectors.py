"""What /metrics exports: raywatch's view of the cluster, read from the database at
each scrape.

Custom collectors, prometheus_client's pattern for state that lives elsewhere: each
`collect()` reads what it exports in a fixed number of queries, whatever the number
of GPUs, trials or incidents, and yields gauge families. They are registered on a
registry of raywatch's own (REGISTRY), never on prometheus_client's global one, where
libraries this process imports register their own series.

Every series carries `cluster`: the cluster its GPU, trial, incident or Ray poll belongs
to (RAYWATCH_CLUSTER_NAME for the one RAY_ADDRESS points at). Cardinality follows what
exists now: GPUs, RUNNING trials, active experiments, incident kinds and sources;
finished trials drop out (docs/prometheus.md, "Cardinality", lists each bound).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from dashboard.cluster.models import Cluster
from dashboard.core.health import effective_state
from dashboard.core.models import SourceHealth
from dashboard.gpus.models import Gpu
from dashboard.gpus.owners import ORPHAN, UNKNOWN
from dashboard.gpus.views_data import GPU_STATES, gpu_payload
from dashboard.incidents.kinds import KINDS
from dashboard.incidents.models import SEVERITIES, Incident
from dashboard.trials.api import STATUSES
from dashboard.trials.models import Trial

GPU_LABELS = ("cluster", "node", "node_ip", "gpu", "uuid", "simulated",
              "owner_kind", "trial", "actor", "job")
TRIAL_LABELS = ("cluster", "experiment", "trial", "node_ip")
SOURCE_LABELS = ("cluster", "source", "scope")
# An experiment is exported while one of its trials is PENDING, RUNNING or PAUSED, and
# for this long after its last trial changed: a finished search's final counts show, then
# it drops out.
ACTIVE_STATUSES = (Trial.PENDING, Trial.RUNNING, Trial.PAUSED)
EXPERIMENT_LINGER = timedelta(hours=1)

Value = Callable[[Any, datetime], float | None]


def _seconds_since(moment: datetime | None, now: datetime) -> float | None:
    return None if moment is None else max((now - moment).total_seconds(), 0.0)


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100


# name, help, value of one Gpu row (None: no sample, never a made-up 0 or -1).
PER_GPU: tuple[tuple[str, str, Value], ...] = (
    ("raywatch_gpu_utilization_ratio", "GPU utilization as NVML reads it, 0 to 1.",
     lambda g, now: _ratio(g.utilization_gpu)),
    ("raywatch_gpu_memory_used_bytes", "GPU memory in use.",
     lambda g, now: g.memory_used_bytes),
    ("raywatch_gpu_memory_total_bytes", "GPU memory in all.",
     lambda g, now: g.memory_total_bytes),
    ("raywatch_gpu_temperature_celsius", "GPU temperature.", lambda g, now: g.temperature_c),
    ("raywatch_gpu_power_watts", "GPU power draw.", lambda g, now: g.power_w),
    ("raywatch_gpu_idle_seconds",
     "How long the GPU has been under RAYWATCH_IDLE_GPU_PERCENT without a break; 0 when "
     "it is not.", lambda g, now: _seconds_since(g.idle_since, now) or 0.0),
    ("raywatch_gpu_reading_age_seconds", "Age of the GPU's latest reading.",
     lambda g, now: _seconds_since(g.at, now)),
)


def _joined(values: Iterable[str | None]) -> str:
    """Distinct non-empty values, sorted, comma-separated: a GPU that two trials share
    (fractional GPUs) names both; one nobody holds has the label empty."""
    return ",".join(sorted({v for v in values if v}))


def owner_labels(processes: list[dict[str, Any]]) -> list[str]:
    """owner_kind, trial, actor, job of the processes on one GPU (as /api/gpus/ has
    them). An orphan's or an unknown owner's ids are left out: they hold nothing."""
    owners = [p["owner"] for p in processes]
    held = [o for o in owners if o["kind"] not in (ORPHAN, UNKNOWN)]
    return [_joined(o["kind"] for o in owners), _joined(o["trial_id"] for o in held),
            _joined(o["actor_id"] for o in held), _joined(o["job_id"] for o in held)]


class GpuCollector:
    """Each GPU's latest reading and who holds it, and the GPUs by state: what
    /api/gpus/ and the GPU wall show, from the same code (gpu_payload)."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        gpus = list(Gpu.objects.order_by("node", "index", "id"))
        tiles = gpu_payload(gpus, now)
        families = [(GaugeMetricFamily(name, text, labels=GPU_LABELS), value)
                    for name, text, value in PER_GPU]
        states: dict[str, Counter[str]] = defaultdict(Counter)
        for gpu, tile in zip(gpus, tiles, strict=True):
            cluster = tile["cluster"]  # its node agent's, as gpu_payload says
            states[cluster][tile["state"]] += 1
            labels = [cluster, gpu.node, gpu.node_ip, str(gpu.index), gpu.uuid,
                      str(gpu.simulated).lower(), *owner_labels(tile["processes"])]
            for family, value in families:
                if (number := value(gpu, now)) is not None:
                    family.add_metric(labels, number)
        yield from (family for family, _ in families)
        by_state = GaugeMetricFamily(
            "raywatch_gpus", "GPUs by state, as the GPU wall colours them (busy, idle: held "
            "but under the idle threshold, free, hot, orphan, hardware, stale).",
            labels=("cluster", "state"))
        for cluster in sorted(states or {settings.CLUSTER_NAME: Counter()}):
            for state in GPU_STATES:
                by_state.add_metric([cluster, state], states[cluster][state])
        yield by_state


class TrialCollector:
    """Trials by status per active experiment; each RUNNING trial's silence and last
    step time. Two queries."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        yield self.by_status(now)
        yield from self.running(now)

    def by_status(self, now: datetime) -> Metric:
        family = GaugeMetricFamily(
            "raywatch_trials", "Trials by status, per experiment that has a PENDING, RUNNING "
            "or PAUSED trial or a trial changed within the last hour.",
            labels=("cluster", "experiment", "status"))
        active = Trial.objects.filter(
            Q(status__in=ACTIVE_STATUSES) | Q(updated_at__gte=now - EXPERIMENT_LINGER)
        ).values("experiment_id")
        rows = (Trial.objects.filter(experiment_id__in=active).order_by()
                .values_list("experiment__cluster__name", "experiment__name", "status")
                .annotate(n=Count("id")))
        counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        for cluster, experiment, status, n in rows:
            counts[(cluster, experiment)][status] += n
        for cluster, experiment in sorted(counts):
            seen = counts[(cluster, experiment)]
            for status in (*STATUSES, *sorted(set(seen) - set(STATUSES))):
                family.add_metric([cluster, experiment, status], seen[status])
        return family

    def running(self, now: datetime) -> Iterator[Metric]:
        silence = GaugeMetricFamily(
            "raywatch_trial_seconds_since_last_result",
            "Seconds since a RUNNING trial's last result (its own timestamp, as the stall "
            "detector reads it); none before its first result.", labels=TRIAL_LABELS)
        step = GaugeMetricFamily(
            "raywatch_trial_last_step_seconds",
            "How long a RUNNING trial's last completed step took.", labels=TRIAL_LABELS)
        rows = (Trial.objects.filter(status=Trial.RUNNING)
                .order_by("experiment__cluster__name", "experiment__name", "trial_id")
                .values_list("experiment__cluster__name", "experiment__name", "trial_id",
                             "node_ip", "last_result_at", "last_step_s"))
        for cluster, experiment, trial_id, node_ip, last_result_at, last_step_s in rows:
            labels = [cluster, experiment, trial_id, node_ip]
            if (silent := _seconds_since(last_result_at, now)) is not None:
                silence.add_metric(labels, silent)
            if last_step_s is not None:
                step.add_metric(labels, last_step_s)
        yield silence
        yield step


class IncidentCollector:
    """Firing incidents by kind and severity; every known kind and severity is present,
    0 when none fires. One query."""

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "raywatch_incidents_open", "Firing incidents (acknowledged or silenced ones "
            "included), by cluster, kind and severity.", labels=("cluster", "kind", "severity"))
        rows = (Incident.objects.filter(state=Incident.FIRING).order_by()
                .values_list("cluster__name", "kind", "severity").annotate(n=Count("id")))
        counts = Counter({(cluster, kind, severity): n for cluster, kind, severity, n in rows})
        # Every known kind and severity of every cluster that has not ended: 0 included.
        clusters = set(Cluster.objects.exclude(state=Cluster.ENDED)
                       .values_list("name", flat=True)) or {settings.CLUSTER_NAME}
        known = [(c, kind, severity) for c in sorted(clusters) for kind in KINDS
                 for severity in SEVERITIES]
        for key in known + sorted(set(counts) - set(known)):
            family.add_metric(list(key), counts[key])
        yield family


class SourceCollector:
    """Each collector source's health, as the status strip shows it, and how long its
    last poll took. One query."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        families = {
            "age": GaugeMetricFamily(
                "raywatch_source_last_success_age_seconds",
                "Seconds since the source's last good poll; none before its first.",
                labels=SOURCE_LABELS),
            "error": GaugeMetricFamily(
                "raywatch_source_error", "1 when the source's last poll failed or it has "
                "stopped polling (down on the status strip), else 0.", labels=SOURCE_LABELS),
            "failures": GaugeMetricFamily(
                "raywatch_source_consecutive_failures", "Failed polls in a row.",
                labels=SOURCE_LABELS),
            "duration": GaugeMetricFamily(
                "raywatch_source_poll_duration_seconds",
                "How long raywatch's last poll of the source took.", labels=SOURCE_LABELS),
            "interval": GaugeMetricFamily(
                "raywatch_source_poll_interval_seconds", "Seconds between polls of the source.",
                labels=SOURCE_LABELS),
        }
        for row in SourceHealth.objects.order_by("source", "scope"):
            # Another cluster's Ray poll is scoped by its name (RAY_ADDRESS's is "").
            cluster = row.scope if row.source == "ray" and row.scope else settings.CLUSTER_NAME
            labels = [cluster, row.source, row.scope]
            state, _ = effective_state(row, now)
            error = state == SourceHealth.DOWN or row.consecutive_failures > 0
            values = {"age": _seconds_since(row.last_success_at, now), "error": int(error),
                      "failures": row.consecutive_failures, "interval": row.interval_s,
                      "duration": None if row.last_duration_ms is None
                      else row.last_duration_ms / 1000}
            for key, value in values.items():
                if value is not None:
                    families[key].add_metric(labels, value)
        yield from families.values()


COLLECTORS = (GpuCollector(), TrialCollector(), IncidentCollector(), SourceCollector())


def build_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    for collector in COLLECTORS:
        registry.register(collector)
    return registry


REGISTRY = build_registry()

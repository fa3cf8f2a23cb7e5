"""GPUs as JSON-ready data: what GET /api/gpus/, the GPU wall and its pushes carry."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from dashboard.gpus.models import Gpu, GpuNode, GpuProcess
from dashboard.gpus.owners import Owner, owners_on_hosts
from dashboard.incidents.resource_rules import HARDWARE_THROTTLES

HOT_C = 85.0
# What gpu_state() answers, worst first.
GPU_STATES = ("stale", "hardware", "orphan", "hot", "idle", "free", "busy")


def gpu_payload(gpus: Iterable[Gpu], now: datetime | None = None) -> list[dict[str, Any]]:
    now = now or timezone.now()
    gpus = list(gpus)
    processes: dict[int, list[GpuProcess]] = defaultdict(list)
    for proc in GpuProcess.objects.filter(gpu_id__in=[g.pk for g in gpus]):
        processes[proc.gpu_id].append(proc)
    owner_maps = owner_maps_for(gpus, processes, now)
    # A GPU's cluster is its node's (its agent's token says which).
    cluster_of = dict(GpuNode.objects.filter(node__in={g.node for g in gpus})
                      .values_list("node", "cluster__name"))
    return [{**tile(g, processes[g.pk], owner_maps.get(g.node_ip, {}), now),
             "cluster": cluster_of.get(g.node, settings.CLUSTER_NAME)} for g in gpus]


def gpus_in(cluster: str | None) -> QuerySet[Gpu]:
    """The GPUs of the cluster of this name (their node agent's), or every GPU."""
    gpus = Gpu.objects.all()
    if not cluster:
        return gpus
    nodes = GpuNode.objects.filter(cluster__name=cluster).values("node")
    if cluster == settings.CLUSTER_NAME:  # and the GPUs no node row claims yet
        return gpus.filter(Q(node__in=nodes) | ~Q(node__in=GpuNode.objects.values("node")))
    return gpus.filter(node__in=nodes)


def narrow_gpus(data: Any, cluster: str) -> Any:
    """The GPU wall's push for a page scoped to one cluster: its GPUs' tiles only."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        return data
    return {**data, "gpus": [t for t in data["gpus"] if t.get("cluster") == cluster]}


def owner_maps_for(gpus: Iterable[Gpu], processes: dict[int, list[GpuProcess]],
                   now: datetime) -> dict[str, dict[int, Owner]]:
    """Owners of every listed process, per host: node_ip -> pid -> Owner (one join for
    all hosts: the same few queries for 1 node or 64)."""
    by_ip: dict[str, dict[int, list[int]]] = defaultdict(dict)
    for gpu in gpus:
        for proc in processes.get(gpu.pk, ()):
            by_ip[gpu.node_ip][proc.pid] = proc.ancestors or []
    return owners_on_hosts(by_ip, now)


def tile(gpu: Gpu, procs: list[GpuProcess], owner_map: dict[int, Owner],
         now: datetime) -> dict[str, Any]:
    rows = [_process(p, owner_map.get(p.pid), now) for p in procs]
    stale = (now - gpu.at).total_seconds() > max(5 * settings.POLL_GPU_S, 15)
    return {
        "uuid": gpu.uuid, "node": gpu.node, "node_ip": gpu.node_ip, "index": gpu.index,
        "name": gpu.name, "simulated": gpu.simulated, "at": gpu.at.isoformat(),
        "utilization": gpu.utilization_gpu, "utilization_memory": gpu.utilization_memory,
        "memory_used": gpu.memory_used_bytes, "memory_total": gpu.memory_total_bytes,
        "temperature": gpu.temperature_c, "power": gpu.power_w, "power_limit": gpu.power_limit_w,
        "sm_clock": gpu.sm_clock_mhz, "memory_clock": gpu.memory_clock_mhz,
        "throttle_reasons": gpu.throttle_reasons, "ecc_corrected": gpu.ecc_corrected,
        "ecc_uncorrected": gpu.ecc_uncorrected, "mig_mode": gpu.mig_mode,
        "idle_since": gpu.idle_since.isoformat() if gpu.idle_since else None,
        "stale": stale, "state": gpu_state(gpu, rows, stale),
        "owner": _owner_summary(rows), "processes": rows,
        "url": gpu_url(gpu.uuid),
    }


def gpu_url(uuid: str) -> str:
    """The GPU page's address (reverse() once, not once a tile: 4,096 tiles a wall)."""
    return _url_pattern().replace(_UUID_MARK, quote(uuid, safe=""))


_UUID_MARK = "0uuid0"


@lru_cache(maxsize=1)
def _url_pattern() -> str:
    return reverse("gpu", args=[_UUID_MARK])


def _process(proc: GpuProcess, owner: Owner | None, now: datetime) -> dict[str, Any]:
    return {
        "pid": proc.pid, "used_memory": proc.used_memory_bytes, "type": proc.type,
        "first_seen_at": proc.first_seen_at.isoformat(),
        "age_s": round((now - proc.first_seen_at).total_seconds(), 1),
        "owner": (owner or Owner("unknown", "unknown")).as_dict(),
    }


def _owner_summary(rows: list[dict[str, Any]]) -> str:
    labels = sorted({r["owner"]["label"] for r in rows})
    return ", ".join(labels)


def gpu_state(gpu: Gpu, rows: list[dict[str, Any]], stale: bool) -> str:
    """One word for the tile's colour, worst first."""
    if stale:
        return "stale"
    if gpu.ecc_uncorrected or set(HARDWARE_THROTTLES) & set(gpu.throttle_reasons or ()):
        return "hardware"
    if any(r["owner"]["kind"] == "orphan" for r in rows):
        return "orphan"
    if gpu.temperature_c is not None and gpu.temperature_c >= HOT_C:
        return "hot"
    if gpu.idle_since is not None:
        return "idle" if rows else "free"
    return "busy"

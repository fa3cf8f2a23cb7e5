"""Typed records that collectors hand to the ingest layer. A value a source
does not report is None, never -1 or 0."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class ResourceUse:
    """One Ray resource on one node: what exists and what is taken."""

    total: float
    used: float | None


@dataclass(frozen=True)
class NodeRecord:
    node_id: str
    node_ip: str
    hostname: str | None
    is_head: bool
    state: str  # "ALIVE" or "DEAD", as Ray says
    state_message: str | None
    started_at: datetime | None
    ended_at: datetime | None
    resources: dict[str, ResourceUse] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    cpu_percent: float | None = None
    mem_total_bytes: int | None = None
    mem_used_bytes: int | None = None
    object_store_used_bytes: int | None = None
    object_store_total_bytes: int | None = None


@dataclass(frozen=True)
class GpuSampleRecord:
    """One NVML reading of one GPU at one instant."""

    node_id: str
    gpu_index: int
    uuid: str
    at: datetime
    utilization_gpu: float | None = None
    utilization_memory: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    simulated: bool = False


@dataclass(frozen=True)
class ActorRecord:
    """A Ray actor that is not DEAD (alive, pending, restarting)."""

    actor_id: str
    state: str
    pid: int | None  # None while pending: Ray reports 0 there
    node_id: str | None
    class_name: str
    repr_name: str
    name: str
    job_id: str | None
    placement_group_id: str | None
    required_resources: dict[str, float] = field(default_factory=dict)

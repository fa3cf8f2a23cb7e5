"""Resource detectors: pure rules `(view, thresholds, now) -> Finding | None` over
GPUs, GPU processes, hosts, pending demand and nodes. No I/O, no clock of their own.
The thresholds are documented in docs/detectors.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dashboard.cluster.models import CallTiming
from dashboard.incidents.findings import Finding

GPU_KINDS = ("gpu_idle_during_step", "gpu_memory_high", "gpu_hardware")
RAY_KINDS = ("gpu_orphan_memory", "gpu_count_mismatch", "demand_infeasible", "demand_pending",
             "object_store_spilling", "node_dead", "call_overdue")
HARDWARE_THROTTLES = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown",
                      "hw_power_brake_slowdown")
GiB = 1024**3


@dataclass(frozen=True)
class ResourceThresholds:
    """Values come from settings (RAYWATCH_*, defaults written there once)."""

    idle_gpu_s: float
    idle_gpu_percent: float
    memory_high_percent: float
    memory_high_s: float
    orphan_grace_s: float
    pending_s: float
    infeasible_grace_s: float
    spill_window_s: float
    node_dead_keep_s: float
    call_overdue_factor: float
    call_overdue_min_s: float


@dataclass(frozen=True)
class GpuView:
    uuid: str
    node: str
    node_ip: str
    index: int
    utilization: float | None = None
    idle_since: datetime | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    memory_high_since: datetime | None = None
    ecc_uncorrected: int | None = None
    ecc_corrected: int | None = None
    throttle_reasons: tuple[str, ...] = ()

    @property
    def subject(self) -> str:
        return f"gpu:{self.uuid}"

    @property
    def where(self) -> str:
        return f"{self.node} GPU {self.index}"


@dataclass(frozen=True)
class WorkView:
    """A running trial or job and the GPUs its processes hold."""

    subject: str
    label: str
    gpus: Sequence[GpuView]
    # Since when it holds all of them: a GPU idle before the work took it (free until
    # then) was not idle during the work's step.
    held_since: datetime | None = None
    last_result_at: datetime | None = None  # trials only
    step: int | None = None  # the step in progress (trials only)


@dataclass(frozen=True)
class ProcessView:
    gpu: GpuView
    pid: int
    used_memory: int | None
    first_seen_at: datetime
    orphan_reason: str | None  # None when the process has a live Ray owner


@dataclass(frozen=True)
class HostView:
    node_ip: str
    ray_gpus: float  # what Ray was told, summed over the Ray nodes on this host
    nvml_gpus: int  # what NVML sees
    ray_nodes: Sequence[str] = ()
    cuda_visible_devices: str | None = None
    cluster_id: int | None = None  # the cluster of its Ray nodes


@dataclass(frozen=True)
class DemandView:
    kind: str
    key: str
    name: str
    bundles: Sequence[dict[str, float]]
    count: int
    feasible: bool | None
    first_seen_at: datetime
    explanation: str = ""
    blockers: Sequence[dict[str, Any]] = field(default_factory=tuple)
    queued: bool = False  # only behind its own job's trials (dashboard.cluster.demand)
    queue_left_at: datetime | None = None  # since when it waits behind others, if it was


@dataclass(frozen=True)
class NodeView:
    node_id: str
    node_ip: str
    state: str
    state_message: str = ""
    ended_at: datetime | None = None
    spilled_bytes: int | None = None
    spilled_changed_at: datetime | None = None
    is_head: bool = False


@dataclass(frozen=True)
class CallView:
    """A Ray task or actor call running now, with its name's usual duration (None: not
    enough of them seen to end) and where it runs."""

    task_id: str
    name: str
    kind: str
    running_since: datetime
    usual_s: float | None
    actor_id: str = ""
    actor: str = ""  # the actor's name or class
    job_id: str = ""
    node_ip: str = ""
    pid: int | None = None


def spoken(seconds: float) -> str:
    """A duration as an alert says it: "45 s", "12 min", "3.5 h" (seconds rounded, as
    the pages' clocks show them: static/raywatch/time.js)."""
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


def gpu_idle_during_step(work: WorkView, th: ResourceThresholds, now: datetime
                         ) -> Finding | None:
    if not work.gpus or any(g.idle_since is None for g in work.gpus):
        return None
    idle_from = max(g.idle_since for g in work.gpus if g.idle_since)
    if work.held_since is not None:
        idle_from = max(idle_from, work.held_since)
    idle_s = (now - idle_from).total_seconds()
    if idle_s < th.idle_gpu_s:
        return None
    if work.last_result_at and (now - work.last_result_at).total_seconds() < th.idle_gpu_s:
        return None  # results keep arriving: steps are finishing, not hung
    where = ", ".join(g.where for g in work.gpus)
    step = f" while step {work.step} is in progress" if work.step else " while it runs"
    return Finding(
        "gpu_idle_during_step", work.subject, "warning",
        f"{work.label}: GPUs under {th.idle_gpu_percent:g}% for {spoken(idle_s)}{step} ({where})",
        {"gpus": [g.uuid for g in work.gpus], "idle_for_s": round(idle_s),
         "step": work.step, "idle_since": idle_from.isoformat(),
         "last_result_at": work.last_result_at.isoformat() if work.last_result_at else None},
    )


def gpu_orphan_memory(proc: ProcessView, th: ResourceThresholds, now: datetime
                      ) -> Finding | None:
    if proc.orphan_reason is None:
        return None
    age = (now - proc.first_seen_at).total_seconds()
    if age < th.orphan_grace_s:
        return None  # a new Ray worker shows in NVML before Ray's next poll lists it
    memory = f"{proc.used_memory / GiB:.1f} GiB" if proc.used_memory else "memory"
    return Finding(
        "gpu_orphan_memory", f"gpu_process:{proc.gpu.uuid}/{proc.pid}", "warning",
        f"pid {proc.pid} holds {memory} on {proc.gpu.where}: {proc.orphan_reason}",
        {"gpu": proc.gpu.uuid, "pid": proc.pid, "used_memory": proc.used_memory,
         "seen_for_s": round(age), "reason": proc.orphan_reason},
    )


def gpu_memory_high(gpu: GpuView, th: ResourceThresholds, now: datetime) -> Finding | None:
    if gpu.memory_high_since is None or not gpu.memory_total or gpu.memory_used is None:
        return None
    held_s = (now - gpu.memory_high_since).total_seconds()
    if held_s < th.memory_high_s:
        return None
    percent = 100 * gpu.memory_used / gpu.memory_total
    return Finding(
        "gpu_memory_high", gpu.subject, "warning",
        f"{gpu.where} memory {percent:.1f}% full for {spoken(held_s)}: "
        "the next start on it may run out of memory",
        {"gpu": gpu.uuid, "percent": round(percent, 1), "for_s": round(held_s)},
    )


def gpu_hardware(gpu: GpuView, th: ResourceThresholds, now: datetime) -> Finding | None:
    throttles = [r for r in gpu.throttle_reasons if r in HARDWARE_THROTTLES]
    problems = []
    if gpu.ecc_uncorrected:
        problems.append(f"{gpu.ecc_uncorrected} uncorrected ECC errors")
    if throttles:
        problems.append("throttled: " + ", ".join(throttles))
    if not problems:
        return None
    severity = "critical" if gpu.ecc_uncorrected else "warning"
    return Finding(
        "gpu_hardware", gpu.subject, severity, f"{gpu.where}: {'; '.join(problems)}",
        {"gpu": gpu.uuid, "ecc_uncorrected": gpu.ecc_uncorrected,
         "ecc_corrected": gpu.ecc_corrected, "throttle_reasons": throttles},
    )


def gpu_count_mismatch(host: HostView, th: ResourceThresholds, now: datetime
                       ) -> Finding | None:
    if int(host.ray_gpus) == host.nvml_gpus:
        return None
    hint = (f" (CUDA_VISIBLE_DEVICES={host.cuda_visible_devices})"
            if host.cuda_visible_devices is not None else "")
    return Finding(
        "gpu_count_mismatch", f"host:{host.node_ip}", "warning",
        f"host {host.node_ip}: Ray was told {host.ray_gpus:g} GPUs, NVML sees "
        f"{host.nvml_gpus}{hint}: check --num-gpus and CUDA_VISIBLE_DEVICES",
        {"ray_gpus": host.ray_gpus, "nvml_gpus": host.nvml_gpus,
         "ray_nodes": list(host.ray_nodes)},
    )


def demand_waiting(demand: DemandView, th: ResourceThresholds, now: datetime
                   ) -> Finding | None:
    """demand_infeasible (no node could ever fit it: alert after a short grace against
    flapping) or demand_pending (it could fit but waits: alert after pending_s). A search
    that queues its own trials behind its running ones is working as meant: no alert."""
    waited = (now - demand.first_seen_at).total_seconds()
    if demand.feasible is None or (demand.feasible and demand.queued):
        return None
    behind_others = (now - (demand.queue_left_at or demand.first_seen_at)).total_seconds()
    if (behind_others < th.pending_s) if demand.feasible else (waited < th.infeasible_grace_s):
        return None
    asks = " + ".join(_shape(b) for b in demand.bundles) or "nothing"
    count = f"{demand.count} x " if demand.count > 1 else ""
    what = f"{demand.kind.replace('_', ' ')} {demand.name or demand.key}"
    if not demand.feasible:
        return Finding("demand_infeasible", f"demand:{demand.kind}:{demand.key}", "critical",
                       f"{what} has waited {spoken(waited)} for {count}{asks}, which no node can "
                       f"ever fit: {demand.explanation}",
                       {"waited_s": round(waited), "bundles": list(demand.bundles)})
    return Finding("demand_pending", f"demand:{demand.kind}:{demand.key}", "warning",
                   f"{what} has waited {spoken(waited)} for {count}{asks}: {demand.explanation}",
                   {"waited_s": round(waited), "bundles": list(demand.bundles),
                    "blockers": list(demand.blockers)})


def _shape(bundle: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(bundle.items())) + "}"


def object_store_spilling(node: NodeView, th: ResourceThresholds, now: datetime
                          ) -> Finding | None:
    if node.spilled_changed_at is None or node.state != "ALIVE":
        return None
    if (now - node.spilled_changed_at).total_seconds() > th.spill_window_s:
        return None
    spilled = (node.spilled_bytes or 0) / GiB
    return Finding(
        "object_store_spilling", f"node:{node.node_id}", "warning",
        f"node {node.node_ip} is spilling objects to disk ({spilled:.2f} GiB spilled so far): "
        "the object store is full",
        {"spilled_bytes": node.spilled_bytes, "last_spill_at": node.spilled_changed_at.isoformat()},
    )


def node_dead(node: NodeView, th: ResourceThresholds, now: datetime) -> Finding | None:
    if node.state != "DEAD":
        return None
    if node.ended_at and (now - node.ended_at).total_seconds() > th.node_dead_keep_s:
        return None
    expected = node.state_message.lower().startswith("expected")
    if expected and node.is_head:
        # `ray stop` on the head: its dying GCS calls the head node dead for a moment
        # before it goes. That is the cluster's session ending (a new session, or the
        # cluster unreachable, then ended, say it), not a node lost under running work.
        return None
    return Finding(
        "node_dead", f"node:{node.node_id}", "info" if expected else "critical",
        f"node {node.node_ip} ({node.node_id[:8]}) is dead: {node.state_message or 'no reason'}",
        {"node_id": node.node_id, "ended_at": node.ended_at.isoformat() if node.ended_at else None},
    )


def call_overdue(call: CallView, th: ResourceThresholds, now: datetime) -> Finding | None:
    """A call running call_overdue_factor times its usual duration, and at least
    call_overdue_min_s: in an RL step the phase that hangs (a reward call of seconds that
    runs for hours) writes nothing, and only Ray knows which call runs. A name not yet
    seen to end often enough has no usual duration: nothing to hold it against."""
    if call.usual_s is None:
        return None
    ran = (now - call.running_since).total_seconds()
    limit = CallTiming.overdue_after(call.usual_s, th.call_overdue_factor, th.call_overdue_min_s)
    if ran < limit:
        return None
    where = f"pid {call.pid} on {call.node_ip or 'an unknown node'}" if call.pid \
        else f"on {call.node_ip or 'an unknown node'}"
    named = call.actor or call.actor_id[:8]  # unsaid when the call's name says it
    actor = f" of actor {named}" if call.actor_id and not call.name.startswith(
        f"{named}.") else ""
    return Finding("call_overdue", f"call:{call.task_id}", "critical",
                   f"{call.name}{actor} has run {spoken(ran)}, usually {spoken(call.usual_s)} "
                   f"({where})",
                   {"call": call.name, "task_id": call.task_id, "kind": call.kind,
                    "running_s": round(ran), "usual_s": round(call.usual_s, 1),
                    "actor_id": call.actor_id, "actor": call.actor, "job_id": call.job_id,
                    "node_ip": call.node_ip, "pid": call.pid})

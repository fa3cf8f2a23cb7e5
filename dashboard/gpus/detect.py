"""Resource detection: build views of the stored GPU and Ray state, run the resource
rules (dashboard.incidents.resource_rules) and sync their incidents.

GPU readings that are not current (agent down) are left out; kinds that depend on
Ray's view (orphans, demand, nodes) are neither opened nor resolved while the Ray
source is not current, so a Ray outage never resolves or invents an incident.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from collectors.pystack import RAY_GET
from dashboard.cluster.callstacks import awaited_calls, request_stacks
from dashboard.cluster.models import Actor, CallTiming, Cluster, Demand, Job, Node, RayCall
from dashboard.cluster.sessions import SESSION_ENDED
from dashboard.cluster.state import ray_is_current
from dashboard.cluster.views_data import call_places, call_stack_payload, call_stacks
from dashboard.gpus.models import Gpu, GpuNode, GpuProcess
from dashboard.gpus.owners import JOB, TRIAL, Owner
from dashboard.gpus.views_data import owner_maps_for
from dashboard.incidents import resource_rules as rules
from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident
from dashboard.incidents.resource_rules import (
    CallView,
    DemandView,
    GpuView,
    HostView,
    NodeView,
    ProcessView,
    ResourceThresholds,
    WorkView,
)
from dashboard.incidents.service import sync_findings
from dashboard.trials.models import Trial
from dashboard.trials.push import push_trials
from dashboard.trials.runs import runs_by_job
from dashboard.trials.views_data import running_trials_by_process


def thresholds() -> ResourceThresholds:
    return ResourceThresholds(
        idle_gpu_s=settings.IDLE_GPU_S, idle_gpu_percent=settings.IDLE_GPU_PERCENT,
        memory_high_percent=settings.GPU_MEMORY_HIGH_PERCENT,
        memory_high_s=settings.GPU_MEMORY_HIGH_S, orphan_grace_s=settings.ORPHAN_GRACE_S,
        pending_s=settings.PENDING_S, infeasible_grace_s=settings.INFEASIBLE_GRACE_S,
        spill_window_s=settings.SPILL_WINDOW_S,
        node_dead_keep_s=settings.NODE_DEAD_KEEP_H * 3600,
        call_overdue_factor=settings.CALL_OVERDUE_FACTOR,
        call_overdue_min_s=settings.CALL_OVERDUE_MIN_S,
    )


def fresh_after(now: datetime) -> datetime:
    return now - timedelta(seconds=max(5 * settings.POLL_GPU_S, 15))


def evaluate_resources(now: datetime) -> dict[str, int]:
    th = thresholds()
    gpus = {g.pk: g for g in Gpu.objects.filter(at__gte=fresh_after(now))}
    views = {pk: gpu_view(g) for pk, g in gpus.items()}
    procs = list(GpuProcess.objects.filter(gpu_id__in=list(gpus)))
    owner_of = _owners(gpus, procs, now)
    findings: list[Finding] = []
    for view in views.values():
        findings += [f for f in (rules.gpu_memory_high(view, th, now),
                                 rules.gpu_hardware(view, th, now)) if f]
    works, context = work_views(gpus, views, procs, owner_of)
    idle = [f for w in works if (f := rules.gpu_idle_during_step(w, th, now))]
    findings += idle + still_idle(idle, {w.subject for w in works}, now)
    for view in views.values():
        context.setdefault(view.subject, {"node_ip": view.node_ip})
    result = sync_findings(rules.GPU_KINDS, findings, now, context)
    if ray_is_current(now):
        ray_findings, ray_context = _ray_findings(gpus, views, procs, owner_of, th, now)
        touched: set[str] = set()
        ray_result = sync_findings(rules.RAY_KINDS, ray_findings, now, ray_context,
                                   touched=touched)
        push_trials(Incident.objects.filter(  # a run's overdue call: its page shows it
            kind__in=rules.RAY_KINDS, subject__in=touched, trial__isnull=False
        ).values_list("trial_id", flat=True).distinct())
        result = {k: result[k] + ray_result[k] for k in result}
    return result


def still_idle(found: list[Finding], working: set[str], now: datetime) -> list[Finding]:
    """gpu_idle_during_step incidents kept firing between the steps of work that idles
    through each of them (a judge behind a rate-limited API: a result every few minutes,
    the GPUs busy for seconds of each): not found this time, but their trial or job still
    holds its GPUs and they were last found (their summary last changed) less than
    IDLE_GPU_CLEAR_S ago. One incident for the pattern, not one a step; it resolves
    once the work has gone that long without idling through a step, or stops."""
    found_subjects = {f.subject for f in found}
    since = now - timedelta(seconds=settings.IDLE_GPU_CLEAR_S)
    kept = Incident.objects.filter(kind="gpu_idle_during_step", state=Incident.FIRING,
                                   subject__in=working - found_subjects, updated_at__gte=since)
    return [Finding(i.kind, i.subject, i.severity, i.summary, i.details, i.cluster_id)
            for i in kept]


def gpu_view(g: Gpu) -> GpuView:
    return GpuView(
        uuid=g.uuid, node=g.node, node_ip=g.node_ip, index=g.index,
        utilization=g.utilization_gpu, idle_since=g.idle_since,
        memory_used=g.memory_used_bytes, memory_total=g.memory_total_bytes,
        memory_high_since=g.memory_high_since, ecc_uncorrected=g.ecc_uncorrected,
        ecc_corrected=g.ecc_corrected, throttle_reasons=tuple(g.throttle_reasons or ()),
    )


def _owners(gpus: dict[int, Gpu], procs: list[GpuProcess], now: datetime
            ) -> dict[int, Owner]:
    """Owner of each GpuProcess row, by its primary key."""
    grouped: dict[int, list[GpuProcess]] = defaultdict(list)
    for proc in procs:
        grouped[proc.gpu_id].append(proc)
    by_ip = owner_maps_for(gpus.values(), grouped, now)
    return {proc.pk: by_ip[gpus[proc.gpu_id].node_ip][proc.pid] for proc in procs}


def work_views(gpus: dict[int, Gpu], views: dict[int, GpuView], procs: list[GpuProcess],
               owner_of: dict[int, Owner]) -> tuple[list[WorkView], dict[str, dict[str, Any]]]:
    """Running trials and jobs with the GPUs their processes hold, and since when."""
    trial_gpus: dict[str, dict[int, datetime]] = defaultdict(dict)
    job_gpus: dict[str, dict[int, datetime]] = defaultdict(dict)
    for proc in procs:
        owner = owner_of[proc.pk]
        if owner.kind == TRIAL and owner.trial_id:
            held = trial_gpus[owner.trial_id]
        elif owner.kind == JOB or (owner.job_id and owner.kind in ("actor", "worker")):
            held = job_gpus[owner.job_id or ""]
        else:
            continue
        held[proc.gpu_id] = min(held.get(proc.gpu_id, proc.first_seen_at), proc.first_seen_at)
    works: list[WorkView] = []
    context: dict[str, dict[str, Any]] = {}
    trials = Trial.objects.select_related("experiment").filter(
        trial_id__in=list(trial_gpus), status=Trial.RUNNING)
    for trial in trials:
        subject = f"trial:{trial.experiment.name}/{trial.trial_id}"
        held = trial_gpus[trial.trial_id]
        works.append(WorkView(
            subject=subject, label=f"trial {trial.trial_id} ({trial.experiment.name})",
            gpus=[views[pk] for pk in sorted(held)], held_since=max(held.values()),
            last_result_at=trial.last_result_at, step=(trial.iteration or 0) + 1))
        context[subject] = {"trial": trial, "experiment": trial.experiment.name,
                            "node_ip": trial.node_ip}
    jobs = Job.objects.filter(status="RUNNING").exclude(job_id="")
    for job in jobs.filter(job_id__in=[j for j in job_gpus if j]):
        subject = f"job:{job.key}"
        held = job_gpus[job.job_id]
        works.append(WorkView(subject=subject, label=f"job {job.key}",
                              gpus=[views[pk] for pk in sorted(held)],
                              held_since=max(held.values())))
        context[subject] = {"node_ip": job.driver_node_ip}
    return works, context


def _ray_findings(gpus: dict[int, Gpu], views: dict[int, GpuView], procs: list[GpuProcess],
                  owner_of: dict[int, Owner], th: ResourceThresholds, now: datetime
                  ) -> tuple[list[Finding], dict[str, dict[str, Any]]]:
    findings: list[Finding] = []
    context: dict[str, dict[str, Any]] = {}
    hurt: list[tuple[str, set[tuple[int, str]]]] = []  # a finding's subject, the jobs it hurts
    for proc in procs:
        owner = owner_of[proc.pk]
        view = ProcessView(views[proc.gpu_id], proc.pid, proc.used_memory_bytes,
                           proc.first_seen_at, owner.reason if owner.orphan else None)
        if finding := rules.gpu_orphan_memory(view, th, now):
            findings.append(finding)
            context[finding.subject] = {"node_ip": view.gpu.node_ip}
            hurt.append((finding.subject, sharing_the_gpu(proc, gpus, procs, owner_of)))
    for host in host_views(gpus, now):
        if finding := rules.gpu_count_mismatch(host, th, now):
            findings.append(replace(finding, cluster_id=host.cluster_id))
            context[finding.subject] = {"node_ip": host.node_ip}
    # An ended cluster's nodes and demand are history (its nodes were marked DEAD when it
    # ended), and so are an ended session's nodes: nothing there to alert on.
    waiting: list[tuple[Demand, Finding]] = []
    for demand in Demand.objects.exclude(cluster__state=Cluster.ENDED):
        if finding := rules.demand_waiting(demand_view(demand), th, now):
            waiting.append((demand, replace(finding, cluster_id=demand.cluster_id)))
    # Demand of an RL run's job (the placement group its trainer waits on for its
    # workers) is its run's incident: on the run's page, in its health and alert group.
    runs = runs_by_job({(d.cluster_id, d.job_id) for d, _ in waiting})
    for demand, finding in waiting:
        findings.append(finding)
        if run := runs.get((demand.cluster_id, demand.job_id)):
            context[finding.subject] = {"trial": run, "experiment": run.experiment.name,
                                        "node_ip": run.node_ip}
    spilling: dict[str, Node] = {}
    for node in Node.objects.exclude(cluster__state=Cluster.ENDED).exclude(
            state_message=SESSION_ENDED):
        view = node_view(node)
        for finding in (rules.object_store_spilling(view, th, now), rules.node_dead(view, th, now)):
            if finding:
                findings.append(replace(finding, cluster_id=node.cluster_id))
                context[finding.subject] = {"node_ip": node.node_ip}
                if finding.kind == "object_store_spilling":
                    spilling[finding.subject] = node
    hurt += jobs_on_nodes(spilling)
    tie_to_runs(hurt, context)
    overdue: dict[int, list[tuple[CallView, Finding]]] = defaultdict(list)
    for view, cluster_id in call_views(th, now):
        if finding := rules.call_overdue(view, th, now):
            overdue[cluster_id].append((view, replace(finding, cluster_id=cluster_id)))
            context[finding.subject] = {"node_ip": view.node_ip}
    # An RL run's overdue call is its run's incident: the run page lists it, its health
    # and its experiment's alerts say so.
    runs = runs_by_job({(c, v.job_id) for c, found in overdue.items() for v, _ in found})
    for cluster_id, found in overdue.items():
        for view, finding in found:
            if run := runs.get((cluster_id, view.job_id)):
                context[finding.subject] |= {"trial": run, "experiment": run.experiment.name}
    for cluster_id, found in overdue.items():
        findings += with_call_stacks(cluster_id, found, now)
    return findings, context


def sharing_the_gpu(orphan: GpuProcess, gpus: dict[int, Gpu], procs: list[GpuProcess],
                    owner_of: dict[int, Owner]) -> set[tuple[int, str]]:
    """The Ray jobs whose live processes share the GPU an orphan holds memory on: the
    runs it may run out of memory (their workers' actors and Ray workers, on the clusters
    whose nodes have that address)."""
    jobs = {owner.job_id for p in procs if p.gpu_id == orphan.gpu_id and p.pk != orphan.pk
            and (owner := owner_of[p.pk]).kind != JOB and not owner.orphan and owner.job_id}
    if not jobs:
        return set()
    clusters = set(Node.objects.filter(node_ip=gpus[orphan.gpu_id].node_ip).exclude(
        cluster__state=Cluster.ENDED).values_list("cluster_id", flat=True))
    return {(cluster, job) for cluster in clusters for job in jobs}


def jobs_on_nodes(nodes: dict[str, Node]) -> list[tuple[str, set[tuple[int, str]]]]:
    """For each finding's node (by its subject), the Ray jobs with live actors there: the
    runs a spilling object store slows."""
    if not nodes:
        return []
    there: dict[tuple[int, str], set[tuple[int, str]]] = defaultdict(set)
    for cluster_id, node_id, job_id in Actor.objects.filter(
            cluster_id__in={n.cluster_id for n in nodes.values()},
            node_id__in={n.node_id for n in nodes.values()}, state="ALIVE").exclude(
            job_id="").values_list("cluster_id", "node_id", "job_id").distinct():
        there[(cluster_id, node_id)].add((cluster_id, job_id))
    return [(subject, there[(n.cluster_id, n.node_id)]) for subject, n in nodes.items()]


def tie_to_runs(hurt: list[tuple[str, set[tuple[int, str]]]],
                context: dict[str, dict[str, Any]]) -> None:
    """A cluster finding that hurts one RL run (its GPU shared with the run's workers, its
    node the run's) is that run's incident too: on its page, in its health and its
    experiment's alert group. One that hurts several stays the cluster's."""
    runs = runs_by_job(set().union(*(jobs for _, jobs in hurt)) if hurt else set())
    for subject, jobs in hurt:
        hurts = {run.pk: run for job in jobs if (run := runs.get(job)) is not None}
        if len(hurts) == 1:
            [run] = hurts.values()
            context[subject] |= {"trial": run, "experiment": run.experiment.name}


def with_call_stacks(cluster_id: int, found: list[tuple[CallView, Finding]], now: datetime
                     ) -> list[Finding]:
    """Each overdue call's finding with where its process is (its node's agent takes a
    few stacks once, in the background: dashboard/cluster/callstacks.py) and, once they
    are in, the verdict in its summary: hung in a frame, or slow and busy there."""
    request_stacks(cluster_id, [(v.task_id, v.name, v.pid, v.node_ip, v.job_id)
                                 for v, _ in found], now)
    stacks = call_stacks(cluster_id, [v.task_id for v, _ in found])
    roots = awaited_calls(cluster_id, [t for t, row in stacks.items()
                                       if row.hung and row.waits_on == RAY_GET])
    shown = []
    for view, finding in found:
        row = stacks.get(view.task_id)
        if row is None:
            shown.append(finding)
            continue
        summary = f"{finding.summary}: {row.verdict}" if row.verdict else finding.summary
        details = {**finding.details, "stack": call_stack_payload(row),
                   "hung": row.hung, "frame": row.frame, "waits_on": row.waits_on}
        if root := roots.get(view.task_id):
            words, details["root"] = root_call(cluster_id, root, now)
            summary = f"{summary}; {words}"
        shown.append(replace(finding, summary=summary, details=details))
    return shown


def root_call(cluster_id: int, root: RayCall, now: datetime) -> tuple[str, dict[str, Any]]:
    """What a call hung in `ray.get` waits for (dashboard.cluster.callstacks.awaited_calls),
    in words and as details: the call, its process, how long it has run and, once its own
    stacks are in (asked here), where it is."""
    nodes, actors = call_places([root])
    node_ip = nodes.get(root.node_id, "")
    request_stacks(cluster_id, [(root.task_id, root.name, root.pid, node_ip,
                                 root.job_id)], now)
    stack = call_stacks(cluster_id, [root.task_id]).get(root.task_id)
    ran = (now - root.first_seen_at).total_seconds()
    where = f"pid {root.pid} on {node_ip or 'an unknown node'}" if root.pid else \
        f"on {node_ip or 'an unknown node'}"
    words = f"it waits on {root.name} ({where}, running {rules.spoken(ran)})"
    if stack is not None and stack.verdict:
        words += f", which is {stack.verdict}"
    return words, {"task_id": root.task_id, "call": root.name, "pid": root.pid,
                   "node_ip": node_ip, "actor": actors.get(root.actor_id, ""),
                   "running_s": round(ran), "verdict": stack.verdict if stack else "",
                   "stack": call_stack_payload(stack),
                   "how": "the longest-running call of its job begun after it (Ray does not "
                          "say which call a ray.get waits for)"}


def call_views(th: ResourceThresholds, now: datetime) -> list[tuple[CallView, int]]:
    """The calls running now in clusters that answer that have run long enough to be
    overdue, each with its name's usual duration and its node's address and actor's name,
    as Ray last listed them (of 10,000 running calls, the few past their limit are read
    whole). A running Tune trial's own calls are left out: its steps are its trial's
    (trial_stalled and step_time_regression, by phase), and one hang is one incident."""
    young = now - timedelta(seconds=th.call_overdue_min_s)
    running = list(RayCall.objects.filter(
        cluster__state=Cluster.ACTIVE, first_seen_at__lte=young).values_list(
        "pk", "cluster_id", "job_id", "name", "first_seen_at"))
    usual = CallTiming.usuals((c, j, n) for _, c, j, n, _ in running)
    if not usual:
        return []
    candidates = [pk for pk, cluster_id, job_id, name, since in running
        if (u := usual.get((cluster_id, job_id, name))) is not None
        and (now - since).total_seconds() >= CallTiming.overdue_after(
            u, th.call_overdue_factor, th.call_overdue_min_s)]
    if not candidates:
        return []
    calls = list(RayCall.objects.filter(pk__in=candidates))
    trials = running_trials_by_process({c.pid for c in calls if c.pid})
    nodes, actors = call_places(calls)
    return [(CallView(task_id=c.task_id, name=c.name, kind=c.kind, running_since=c.first_seen_at,
                      usual_s=usual[(c.cluster_id, c.job_id, c.name)], actor_id=c.actor_id,
                      actor=actors.get(c.actor_id, ""), job_id=c.job_id,
                      node_ip=nodes.get(c.node_id, ""), pid=c.pid), c.cluster_id)
            for c in calls if (c.cluster_id, nodes.get(c.node_id, ""), c.pid) not in trials]


def host_views(gpus: dict[int, Gpu], now: datetime) -> list[HostView]:
    """Hosts with a current agent and Ray nodes: how many GPUs each side sees.
    Simulated GPUs are left out: Ray cannot have been told about them. A host is an
    address in one cluster: an agent's GPUs are compared with its own cluster's nodes."""
    agents = list(GpuNode.objects.filter(last_poll_at__gte=fresh_after(now))
                  .exclude(source="simulated").values_list("node", "node_ip", "cluster_id"))
    nvml: dict[tuple[int, str], int] = {(c, ip): 0 for _, ip, c in agents}
    cluster_of = {node: c for node, _, c in agents}
    for gpu in gpus.values():
        key = (cluster_of.get(gpu.node, -1), gpu.node_ip)
        if key in nvml and not gpu.simulated:
            nvml[key] += 1
    ray: dict[tuple[int, str], list[Node]] = defaultdict(list)
    for node in Node.objects.filter(state=Node.ALIVE, node_ip__in={ip for _, ip in nvml}):
        if (node.cluster_id, node.node_ip) in nvml:
            ray[(node.cluster_id, node.node_ip)].append(node)
    return [
        HostView(node_ip=key[1], nvml_gpus=nvml[key],
                 ray_gpus=sum((n.resources.get("GPU") or {}).get("total", 0) for n in nodes),
                 ray_nodes=[n.node_id for n in nodes], cluster_id=key[0])
        for key, nodes in sorted(ray.items())
    ]


def demand_view(d: Demand) -> DemandView:
    return DemandView(kind=d.kind, key=d.key, name=d.name, bundles=d.bundles, count=d.count,
                      feasible=d.feasible, first_seen_at=d.first_seen_at,
                      explanation=d.explanation, blockers=d.blockers, queued=d.queued,
                      queue_left_at=d.queue_left_at)


def node_view(n: Node) -> NodeView:
    return NodeView(node_id=n.node_id, node_ip=n.node_ip, state=n.state,
                    state_message=n.state_message, ended_at=n.ended_at,
                    spilled_bytes=n.object_store_spilled_bytes,
                    spilled_changed_at=n.spilled_changed_at, is_head=n.is_head)

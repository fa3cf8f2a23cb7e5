"""Store one agent report (docs/agent-protocol.md): check it all, then store each new
batch once, in one transaction. A token reports its own node only. Trial logs go
through the trials app's store (the path raywatch's own log reader takes) and are
pushed to the pages once stored."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from collectors.agent import wire
from collectors.agent.trialwire import decode_trial_log
from collectors.records import GpuPoll, ProcessFact, TrialUpdate
from dashboard.agents.models import AgentStream, NodeProcess, NodeToken
from dashboard.cluster.models import Cluster
from dashboard.cluster.registry import announce
from dashboard.core.errors import ApiError
from dashboard.core.health import record as record_health
from dashboard.gpus.ingest import ingest_gpu_polls
from dashboard.gpus.models import Agent, Gpu
from dashboard.trials.push import push_updates
from dashboard.trials.store import IngestStats, store_updates

log = logging.getLogger("raywatch.agents")


class BatchRefused(ApiError):
    """One batch can never be stored (400 malformed, 403 another node's); the agent
    drops it by its `seq` and sends the rest again."""

    def __init__(self, message: str, status: int, seq: Any) -> None:
        super().__init__(message, status)
        self.seq = seq


@dataclass
class Batch:
    stream: str
    seq: int
    polls: list[tuple[GpuPoll, str | None]] = field(default_factory=list)
    snapshots: list[tuple[datetime, tuple[ProcessFact, ...]]] = field(default_factory=list)
    trial_logs: list[TrialUpdate] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def ingest_report(token: NodeToken, body: Any, now: datetime) -> dict[str, Any]:
    agent = _check_envelope(token, body)
    batches = [_decode_batch(token.node, raw) for raw in body["batches"]]
    _check_gpus_are_the_nodes(token.node, batches)
    stored: list[int] = []
    duplicate: list[int] = []
    skipped: Counter[str] = Counter()
    with transaction.atomic():
        _note_agent(token, agent)
        last = _last_seqs(token, {b.stream for b in batches})
        for batch in batches:
            if batch.seq <= last.get(batch.stream, 0):
                duplicate.append(batch.seq)
                continue
            last[batch.stream] = batch.seq
            stored.append(batch.seq)
            skipped.update(batch.skipped)
        new = [b for b in batches if b.seq in stored]
        _store_polls(token, agent, [p for b in new for p in b.polls], now)
        _store_processes(token, [s for b in new for s in b.snapshots])
        trials = store_updates([u for b in new for u in b.trial_logs], now, token.cluster_id)
        _save_seqs(token, last, now)
    _push(trials)
    return {"version": wire.VERSION, "node": token.node, "stored": stored,
            "duplicate": duplicate, "skipped": dict(skipped)}


def _check_envelope(token: NodeToken, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError("the report is not a JSON object")
    if body.get("version") != wire.VERSION:
        raise ApiError(f"protocol version {body.get('version')!r} is not spoken here; "
                       f"this raywatch speaks {wire.VERSION}")
    batches = body.get("batches")
    if not isinstance(batches, list) or not 1 <= len(batches) <= wire.MAX_BATCHES:
        raise ApiError(f"batches: a list of 1 to {wire.MAX_BATCHES} batches")
    agent = body.get("agent") if isinstance(body.get("agent"), dict) else {}
    if agent.get("node") and agent["node"] != token.node:
        raise ApiError(f"this token reports node {token.node!r} only, not {agent['node']!r}",
                       403)
    claimed = agent.get("node_ip")
    if claimed and token.node_ip and claimed != token.node_ip:
        raise ApiError(f"this token's node {token.node!r} is at {token.node_ip}, not "
                       f"{claimed}", 403)
    return agent


def _decode_batch(node: str, raw: Any) -> Batch:
    seq = raw.get("seq") if isinstance(raw, dict) else None
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise ApiError("each batch needs a seq: a positive integer")
    stream, records = raw.get("stream"), raw.get("records")
    if not isinstance(stream, str) or not 1 <= len(stream) <= 64:
        raise BatchRefused("stream: the spool's id, 1 to 64 characters", 400, seq)
    if not isinstance(records, list):
        raise BatchRefused("records: a list", 400, seq)
    batch = Batch(stream=stream, seq=seq)
    for item in [raw, *records]:
        _refuse_other_node(node, item, seq)
    try:
        for item in records:
            _decode_record(node, item, batch)
    except wire.WireError as exc:
        raise BatchRefused(f"batch {seq}: {exc}", 400, seq) from None
    return batch


def _refuse_other_node(node: str, item: Any, seq: int) -> None:
    """A `node` written anywhere in a batch must be the token's."""
    nested = item.get("gpus") if isinstance(item, dict) else None
    for part in [item, *(nested if isinstance(nested, list) else [])]:
        named = part.get("node") if isinstance(part, dict) else None
        if named is not None and named != node:
            raise BatchRefused(f"batch {seq} speaks for node {named!r}; this token reports "
                               f"node {node!r} only", 403, seq)


def _decode_record(node: str, item: Any, batch: Batch) -> None:
    kind = item.get("kind") if isinstance(item, dict) else None
    if kind == wire.GPU_POLL:
        batch.polls.append(wire.decode_gpu_poll(item, node))
    elif kind == wire.PROCESSES:
        batch.snapshots.append(wire.decode_processes(item))
    elif kind == wire.TRIAL_LOG:
        batch.trial_logs.append(decode_trial_log(item, node))
    elif isinstance(kind, str) and kind:
        batch.skipped[kind[:40]] += 1  # a newer agent's kind: acknowledged, counted
    else:
        raise wire.WireError("a record without a kind")


def _check_gpus_are_the_nodes(node: str, batches: list[Batch]) -> None:
    uuids = {g.uuid: b.seq for b in batches for poll, _ in b.polls for g in poll.gpus}
    if not uuids:
        return
    other = Gpu.objects.filter(uuid__in=list(uuids)).exclude(node=node).first()
    if other is not None:
        raise BatchRefused(f"GPU {other.uuid} is node {other.node!r}'s; this token reports "
                           f"node {node!r} only", 403, uuids[other.uuid])


def _note_agent(token: NodeToken, agent: dict[str, Any]) -> None:
    changes: dict[str, Any] = {}
    if not token.node_ip and isinstance(agent.get("node_ip"), str):
        changes["node_ip"] = agent["node_ip"][:64]  # pinned by the first report
    if isinstance(agent.get("version"), str):
        changes["agent_version"] = agent["version"][:32]
    dropped = (agent.get("spool") or {}).get("dropped") if isinstance(agent.get("spool"),
                                                                        dict) else None
    if isinstance(dropped, int):
        changes["spool_dropped"] = dropped
    head = announce(token.prefix, agent.get("head"), timezone.now()) if agent.get("head") \
        else None
    if (head is not None and head.approval == Cluster.APPROVED and head.pk != token.cluster_id
            and head.announced_by == token.prefix):
        # The head's own agent of a cluster it announced and an admin approved: what it
        # reads belongs to that cluster from now on.
        changes["cluster_id"] = head.pk
    if changes:
        NodeToken.objects.filter(pk=token.pk).update(**changes)
        for name, value in changes.items():
            setattr(token, name, value)


def _last_seqs(token: NodeToken, streams: set[str]) -> dict[str, int]:
    rows = AgentStream.objects.select_for_update().filter(token=token, stream__in=streams)
    return {row.stream: row.last_seq for row in rows}


def _save_seqs(token: NodeToken, last: dict[str, int], now: datetime) -> None:
    rows = [AgentStream(token=token, stream=s, last_seq=seq, updated_at=now)
            for s, seq in last.items()]
    AgentStream.objects.bulk_create(rows, update_conflicts=True,
                                    unique_fields=["token", "stream"],
                                    update_fields=["last_seq", "updated_at"])


def _store_polls(token: NodeToken, agent: dict[str, Any],
                 polls: list[tuple[GpuPoll, str | None]], now: datetime) -> None:
    if not polls:
        return
    node_ip = token.node_ip or str(agent.get("node_ip") or "")
    ingest_gpu_polls([(poll, node_ip) for poll, error in polls if error is None], now)
    poll, error = max(polls, key=lambda p: p[0].at)
    warnings = list(poll.problems) or ([] if poll.gpus else ["NVML sees no GPU on this node"])
    record_health("nvml", token.node, settings.POLL_GPU_S, 0.0, error, warnings)
    if error is None:
        values = {"node_ip": node_ip, "queue": "", "last_poll_at": now,
                  "cluster_id": token.cluster_id,
                  "source": "simulated" if poll.simulated else "nvml",
                  "driver_version": (poll.driver_version or "")[:64]}
        Agent.objects.update_or_create(node=token.node, defaults=values,
                                       create_defaults={**values, "registered_at": now})


def _store_processes(token: NodeToken, snapshots: list[tuple[datetime, tuple]]) -> None:
    """Apply the newest snapshot, unless a newer one was stored already."""
    if not snapshots:
        return
    at, facts = max(snapshots, key=lambda s: s[0])
    if token.processes_at is not None and at <= token.processes_at:
        return
    NodeProcess.objects.filter(node=token.node).exclude(pid__in=[f.pid for f in facts]).delete()
    NodeProcess.objects.bulk_create(
        [NodeProcess(node=token.node, at=at, pid=f.pid, create_time=f.create_time, ppid=f.ppid,
                     title=f.title, state=f.state, cpu_percent=f.cpu_percent,
                     rss_bytes=f.rss_bytes, threads=f.threads) for f in facts],
        update_conflicts=True, unique_fields=["node", "pid"],
        update_fields=["at", "create_time", "ppid", "title", "state", "cpu_percent",
                       "rss_bytes", "threads"])
    NodeToken.objects.filter(pk=token.pk).update(processes_at=at)
    token.processes_at = at


def _push(stats: IngestStats) -> None:
    """Stored already: a push that fails loses a live update, not the results."""
    if not stats.changed_trials:
        return
    try:
        push_updates(stats)
    except Exception as exc:  # the page catches up at its next load or poll push
        log.warning("trial push after an agent report failed: %s", exc)

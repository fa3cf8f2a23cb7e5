"""Store one agent report (docs/agent-protocol.md): check it all, then store each new
batch once, in one transaction. A token reports its own node only. Trial logs go
through the trials app's store (the path raywatch's own log reader takes) and are
pushed to the pages once stored. The times an agent stamps by its own clock are put on
raywatch's (AgentClock): a node whose clock is off neither dates its GPUs in the future
nor freezes its process table."""

from __future__ import annotations

import json
import logging
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from collectors.agent import wire
from collectors.agent.trialwire import decode_trial_log, refused_trial_log
from collectors.records import GpuPoll, ProcessFact, TrialUpdate
from dashboard.agents.models import AgentStream, NodeProcess, NodeToken
from dashboard.agents.tokens import authenticate_many, usable
from dashboard.cluster.models import Cluster
from dashboard.cluster.registry import announce
from dashboard.core.bulk import upsert
from dashboard.core.errors import ApiError
from dashboard.core.health import record_many
from dashboard.gpus.ingest import ingest_gpu_polls
from dashboard.gpus.models import Gpu, GpuNode
from dashboard.trials import planner
from dashboard.trials.push import push_updates
from dashboard.trials.store import IngestStats, store_updates
from dashboard.trials.tasks import evaluate_soon

log = logging.getLogger("raywatch.agents")
# What a report updates of its node's GpuNode row (registered_at: when it was created).
GPU_NODE_FIELDS = ("node_ip", "last_poll_at", "cluster", "source", "driver_version")
MAX_PROBLEMS, PROBLEM_CHARS = 10, 500  # of agent.problems, kept as the agent said them


@dataclass(frozen=True)
class AgentClock:
    """An agent's clock as raywatch's, from one report: the agent says when it sent the
    report by its clock (agent.sent_at); raywatch knows when it received it. The offset
    (received - sent_at, which includes the trip: a fraction of a second) moves every
    time of the report onto raywatch's clock, and nothing is dated after its receipt."""

    offset: timedelta
    received: datetime

    @classmethod
    def of(cls, sent_at: Any, received: datetime) -> AgentClock:
        try:
            return cls(received - wire.decode_time(sent_at, "agent.sent_at"), received)
        except (wire.WireError, OverflowError):  # not said: its times as they come
            return cls(timedelta(0), received)

    def __call__(self, at: datetime) -> datetime:
        try:
            return min(at + self.offset, self.received)
        except OverflowError:  # year 1 or 9999 by the agent's clock
            return self.received

    @property
    def skew_s(self) -> int:
        """The agent's clock less raywatch's, whole seconds."""
        return -round(self.offset.total_seconds())


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


@dataclass
class Report:
    """One agent's report, checked and decoded, not stored yet."""

    token: NodeToken
    agent: dict[str, Any]
    batches: list[Batch]
    # How old the newest batch was when the agent sent the report, by the agent's clock
    # (agent.sent_at less the batch's `at`); None: an agent that does not say.
    lag: timedelta | None = None
    skew_s: int | None = None  # the agent's clock less raywatch's; None: it does not say


@dataclass(frozen=True)
class Sent:
    """A report as its request carried it: not authenticated, not decoded yet."""

    authorization: str | None  # the Authorization header
    address: str
    body: bytes
    encoding: str  # Content-Encoding
    received: datetime | None = None  # when its body had arrived (None: when stored)


def ingest_sent(sent: list[Sent], now: datetime) -> list[dict[str, Any] | Exception]:
    """Authenticate (one query for all), decode and store the reports of many agents
    together (ingest_reports): each one's answer, or what refuses it."""
    found = authenticate_many([(s.authorization, s.address) for s in sent], now)
    reports: list[Report] = []
    refusals: list[Exception | None] = []
    for one, token in zip(sent, found, strict=True):
        try:
            if isinstance(token, ApiError):
                raise token
            reports.append(decode_report(token, read_body(one.body, one.encoding),
                                         one.received or now))
            refusals.append(None)
        except (ApiError, RequestDataTooBig) as exc:
            refusals.append(exc)
        except Exception as exc:  # a report's own failure is its alone, never its group's
            log.exception("an agent report could not be decoded")
            refusals.append(ApiError(f"raywatch could not read this report: "
                                     f"{type(exc).__name__}", 400))
    stored = iter(ingest_reports(reports, now) if reports else [])
    return [next(stored) if refused is None else refused for refused in refusals]


def read_body(raw: bytes, encoding: str) -> Any:
    """A request's JSON; a gzip body (Content-Encoding: gzip, which hello offers) is
    inflated up to MAX_BODY_BYTES, past which it is 413 like a plain body."""
    encoding = encoding.strip().lower()
    if encoding == "gzip":
        inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            raw = inflate.decompress(raw, wire.MAX_BODY_BYTES + 1)
        except zlib.error:
            raise ApiError("the body is not valid gzip") from None
        if len(raw) > wire.MAX_BODY_BYTES or inflate.unconsumed_tail:
            raise RequestDataTooBig("inflated body too large")
    elif encoding != "identity":
        raise ApiError(f"Content-Encoding {encoding!r}: only gzip", 415)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError("the body is not JSON raywatch can read") from None


def decode_report(token: NodeToken, body: Any, received: datetime | None = None) -> Report:
    """Check a report's shape and decode its records (no database), its times put on
    raywatch's clock as of `received` (default: now)."""
    agent = _check_envelope(token, body)
    clock = AgentClock.of(agent.get("sent_at"), received or timezone.now())
    batches = [_decode_batch(token.node, raw, clock) for raw in body["batches"]]
    skew = clock.skew_s if "sent_at" in agent else None
    return Report(token, agent, batches, _lag(agent.get("sent_at"), body["batches"]), skew)


def _lag(sent_at: Any, batches: list[Any]) -> timedelta | None:
    """How old the report's newest batch was when it was sent, both times by the agent's
    clock; None when either is missing or unreadable (the report is stored all the
    same: this only dates the data)."""
    try:
        newest = max(wire.decode_time(raw.get("at"), "at") for raw in batches)
        return max(wire.decode_time(sent_at, "agent.sent_at") - newest, timedelta(0))
    except (wire.WireError, ValueError, TypeError):
        return None


def ingest_reports(reports: list[Report], now: datetime) -> list[dict[str, Any] | Exception]:
    """Store the reports of many agents in one transaction (one upsert + COPY of all
    their GPU polls): each report's answer, or what refuses it. When that transaction
    fails, each report is stored alone, so a report's failure is its own only."""
    try:
        return _store_together(reports, now)
    except Exception as exc:
        if len(reports) == 1:
            return [_batch_by_batch(reports[0], now, exc)]
        log.warning("storing %d agent reports together failed (%s); storing each alone",
                    len(reports), exc)
        return [_alone(report, now) for report in reports]


def _alone(report: Report, now: datetime) -> dict[str, Any] | Exception:
    try:  # the token as stored: what the failed group noted on it was rolled back
        report.token.refresh_from_db()
    except Exception as exc:
        return exc
    return ingest_reports([report], now)[0]


def _batch_by_batch(report: Report, now: datetime, failure: Exception
                    ) -> dict[str, Any] | Exception:
    """A report that failed on its own. The database being away is answered 503 and
    the agent sends it again. Anything else is in its data (a value longer than raywatch
    keeps, a metric name Postgres refuses) and would fail the same way each time, so its
    batches are stored one at a time, in order, until the one that fails: that one is
    refused by its seq (the agent drops it, says so, and sends the rest again, which
    the batches stored here answer as duplicates). Without this the agent would send
    the same report for ever and its node's data would stop there."""
    if isinstance(failure, OperationalError | InterfaceError):
        return failure
    answer: dict[str, Any] = {"stored": [], "duplicate": [], "skipped": Counter()}
    for batch in report.batches:
        try:
            report.token.refresh_from_db()  # what a failed try noted was rolled back
            one = _store_together([replace(report, batches=[batch])], now)[0]
        except (OperationalError, InterfaceError) as exc:
            return exc
        except Exception as exc:
            log.error("node %s: batch %s cannot be stored (%s: %s); refused",
                      report.token.node, batch.seq, type(exc).__name__, exc)
            return BatchRefused(f"batch {batch.seq}: raywatch cannot store it: "
                                f"{type(exc).__name__}: {str(exc)[:300]}", 400, batch.seq)
        if isinstance(one, Exception):  # refused before storing (another node's GPU)
            return one
        answer = {**one, "stored": answer["stored"] + one["stored"],
                  "duplicate": answer["duplicate"] + one["duplicate"],
                  "skipped": answer["skipped"] + Counter(one["skipped"])}
    return {**answer, "skipped": dict(answer["skipped"])}  # each batch went in alone


def _store_together(reports: list[Report], now: datetime) -> list[dict[str, Any] | Exception]:
    outcomes: list[dict[str, Any] | Exception | None] = list(_foreign_gpus(reports, now))
    storing = [r for r, refused in zip(reports, outcomes, strict=True) if refused is None]
    with transaction.atomic():
        for report in storing:
            _note_agent(report.token, report.agent, report.skew_s)
        last = _last_seqs(storing)
        answers = [_sort_batches(report, last) for report in storing]
        new = [(report, batches) for report, (batches, _) in zip(storing, answers, strict=True)]
        _store_polls(new, now)
        for report, batches in new:
            _store_processes(report.token, [s for b in batches for s in b.snapshots], now)
        trials = _store_trial_logs(new, now)
        _save_seqs(last, _data_at(storing, now), now)
    planner.stored(sum(stats.results for stats in trials))  # after the transaction
    for stats in trials:
        _push(stats)
    done = iter(answer for _, answer in answers)
    return [refused if refused is not None else next(done) for refused in outcomes]


def _sort_batches(report: Report, last: dict[tuple[int, str], int]
                  ) -> tuple[list[Batch], dict[str, Any]]:
    """The report's batches not stored yet (its stream's seqs advanced in `last`), and
    the answer that says which were stored and which were duplicates."""
    new: list[Batch] = []
    duplicate: list[int] = []
    skipped: Counter[str] = Counter()
    for batch in report.batches:
        key = (report.token.pk, batch.stream)
        if batch.seq <= last.get(key, 0):
            duplicate.append(batch.seq)
            continue
        last[key] = batch.seq
        new.append(batch)
        skipped.update(batch.skipped)
    return new, {"version": wire.VERSION, "node": report.token.node,
                 "stored": [b.seq for b in new], "duplicate": duplicate,
                 "skipped": dict(skipped)}


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
    if claimed and not token.node_ip and isinstance(claimed, str):
        # The first report pins the node's address: never one another node's token (not
        # revoked, not expired) holds in the cluster, whose commands and processes it
        # would then get (issue 43, L2).
        holder = usable(timezone.now()).filter(
            cluster_id=token.cluster_id, node_ip=claimed[:64]).exclude(
            node=token.node).values_list("node", flat=True).first()
        if holder is not None:
            raise ApiError(f"address {claimed} is node {holder!r}'s (its token holds it): "
                           f"this token's node {token.node!r} cannot take it; revoke that "
                           "token first if the address moved", 403)
    return agent


def _decode_batch(node: str, raw: Any, clock: AgentClock) -> Batch:
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
            _decode_record(node, item, batch, clock)
    except wire.WireError as exc:
        raise BatchRefused(f"batch {seq}: {exc}", 400, seq) from None
    except (ValueError, OverflowError, TypeError, RecursionError) as exc:
        # A value no check foresaw (a 400-digit number where a float goes): this batch
        # can never be stored, whatever else is sent with it.
        raise BatchRefused(f"batch {seq}: a value raywatch cannot read "
                           f"({type(exc).__name__}: {str(exc)[:200]})", 400, seq) from None
    return batch


def _refuse_other_node(node: str, item: Any, seq: int) -> None:
    """A `node` written anywhere in a batch must be the token's."""
    nested = item.get("gpus") if isinstance(item, dict) else None
    for part in [item, *(nested if isinstance(nested, list) else [])]:
        named = part.get("node") if isinstance(part, dict) else None
        if named is not None and named != node:
            raise BatchRefused(f"batch {seq} speaks for node {named!r}; this token reports "
                               f"node {node!r} only", 403, seq)


def _decode_record(node: str, item: Any, batch: Batch, clock: AgentClock) -> None:
    kind = item.get("kind") if isinstance(item, dict) else None
    if kind == wire.GPU_POLL:
        batch.polls.append(wire.decode_gpu_poll(item, node, clock))
    elif kind == wire.PROCESSES:
        batch.snapshots.append(wire.decode_processes(item, clock))
    elif kind == wire.TRIAL_LOG:
        # One trial's record the server cannot read costs that record only: the trial
        # shows it as its problem, and the rest of the batch is stored.
        try:
            batch.trial_logs.append(decode_trial_log(item, node))
        except (wire.WireError, ValueError, OverflowError, TypeError, RecursionError) as exc:
            reason = f"{type(exc).__name__}: {str(exc)[:300]}" if not isinstance(
                exc, wire.WireError) else str(exc)[:300]
            refused = refused_trial_log(item, node, reason)
            if refused is not None:
                batch.trial_logs.append(refused)
            batch.skipped["trial_log refused"] += 1
            log.warning("node %s: a trial_log record refused (%s)", node, reason)
    elif isinstance(kind, str) and kind:
        batch.skipped[kind[:40]] += 1  # a newer agent's kind: acknowledged, counted
    else:
        raise wire.WireError("a record without a kind")


def _foreign_gpus(reports: list[Report], now: datetime) -> list[BatchRefused | None]:
    """For each report, a refusal when it carries a GPU another node reported within
    RAYWATCH_GPU_OWNER_HOLD_H (or an earlier report of the same group claimed); one
    query for all of them. A GPU its node has not reported for that long may move (a
    card moved, a node renamed or rebuilt): it is not another node's for ever."""
    uuids = {g.uuid for r in reports for b in r.batches for poll, _ in b.polls
             for g in poll.gpus}
    held = now - timedelta(hours=settings.GPU_OWNER_HOLD_H)
    owner = dict(Gpu.objects.filter(uuid__in=list(uuids), at__gte=held).values_list(
        "uuid", "node")) if uuids else {}
    refusals = []
    for report in reports:
        node = report.token.node
        mine = {g.uuid: b.seq for b in report.batches for poll, _ in b.polls for g in poll.gpus}
        other = next((u for u in mine if owner.get(u, node) != node), None)
        if other is None:
            owner.update(dict.fromkeys(mine, node))
        refusals.append(None if other is None else BatchRefused(
            f"GPU {other} is node {owner[other]!r}'s; this token reports node {node!r} only",
            403, mine[other]))
    return refusals


def _note_agent(token: NodeToken, agent: dict[str, Any], skew_s: int | None) -> None:
    if skew_s is not None and token.clock_skew_s is not None and abs(
            skew_s - token.clock_skew_s) < 2:
        skew_s = token.clock_skew_s  # the trip's jitter is no change: no UPDATE for it
    changes: dict[str, Any] = {"agent_problems": _problems(agent.get("problems")),
                               "clock_skew_s": skew_s}
    if not token.node_ip and isinstance(agent.get("node_ip"), str):
        changes["node_ip"] = agent["node_ip"][:64]  # pinned by the first report
    if isinstance(agent.get("version"), str):
        changes["agent_version"] = agent["version"][:32]
    dropped = (agent.get("spool") or {}).get("dropped") if isinstance(agent.get("spool"),
                                                                        dict) else None
    if isinstance(dropped, int) and 0 <= dropped < 2**63:
        changes["spool_dropped"] = dropped
    head = announce(token.prefix, agent.get("head"), timezone.now()) if agent.get("head") \
        else None
    if (head is not None and head.approval == Cluster.APPROVED and head.pk != token.cluster_id
            and head.announced_by == token.prefix):
        # The head's own agent of a cluster it announced and an admin approved: what it
        # reads belongs to that cluster from now on.
        changes["cluster_id"] = head.pk
    changes = {k: v for k, v in changes.items() if getattr(token, k) != v}
    if changes:  # most reports change nothing: no UPDATE a report
        NodeToken.objects.filter(pk=token.pk).update(**changes)
        for name, value in changes.items():
            setattr(token, name, value)


def _problems(said: Any) -> list[str]:
    """agent.problems as shown: text only, bounded (an agent's words, never obeyed)."""
    if not isinstance(said, list):
        return []
    return [p[:PROBLEM_CHARS] for p in said if isinstance(p, str) and p][:MAX_PROBLEMS]


def _last_seqs(reports: list[Report]) -> dict[tuple[int, str], int]:
    """The highest seq stored of each (token, stream) of the reports, rows locked (in
    one order, so that two groups never wait on each other)."""
    if not reports:
        return {}
    wanted = {(r.token.pk, b.stream) for r in reports for b in r.batches}
    rows = AgentStream.objects.select_for_update().filter(
        token__in=[t for t, _ in wanted], stream__in=[s for _, s in wanted]).order_by("pk")
    return {(row.token_id, row.stream): row.last_seq for row in rows
            if (row.token_id, row.stream) in wanted}


def _data_at(reports: list[Report], now: datetime) -> dict[tuple[int, str], datetime | None]:
    """How far each (token, stream)'s data reaches once these reports are stored."""
    return {(r.token.pk, b.stream): now - r.lag if r.lag is not None else None
            for r in reports for b in r.batches}


def _save_seqs(last: dict[tuple[int, str], int],
               data_at: dict[tuple[int, str], datetime | None], now: datetime) -> None:
    rows = [AgentStream(token_id=token, stream=stream, last_seq=seq, updated_at=now,
                        data_at=data_at.get((token, stream)))
            for (token, stream), seq in last.items()]
    AgentStream.objects.bulk_create(rows, update_conflicts=True,
                                    unique_fields=["token", "stream"],
                                    update_fields=["last_seq", "updated_at", "data_at"])


def _store_polls(new: list[tuple[Report, list[Batch]]], now: datetime) -> None:
    """Every report's new GPU polls with one ingest_gpu_polls; then each node's source
    health and agent row, from its newest poll, a statement or two for all nodes."""
    polls = [(report, [p for b in batches for p in b.polls]) for report, batches in new]
    ingest_gpu_polls([(poll, _node_ip(report)) for report, mine in polls
                      for poll, error in mine if error is None], now)
    newest = [(report, max(mine, key=lambda p: p[0].at)) for report, mine in polls if mine]
    if not newest:
        return
    record_many("nvml", settings.POLL_GPU_S, 0.0, {
        report.token.node: (error, list(poll.problems) or (
            [] if poll.gpus else ["NVML sees no GPU on this node"]))
        for report, (poll, error) in newest})
    nodes = {report.token.node: GpuNode(
        node=report.token.node, node_ip=_node_ip(report), last_poll_at=now,
        cluster_id=report.token.cluster_id, registered_at=now,
        source="simulated" if poll.simulated else "nvml",
        driver_version=(poll.driver_version or "")[:64])
        for report, (poll, error) in newest if error is None}
    upsert(GpuNode, list(nodes.values()), ["node"], GPU_NODE_FIELDS)


def _node_ip(report: Report) -> str:
    return report.token.node_ip or str(report.agent.get("node_ip") or "")


def _store_processes(token: NodeToken, snapshots: list[tuple[datetime, tuple]],
                     now: datetime) -> None:
    """Apply the newest snapshot, unless a newer one was stored already. A stored time
    after `now` (an agent whose clock ran ahead, before times were put on raywatch's
    clock) is no newer than anything: it would hold the table still until then."""
    if not snapshots:
        return
    at, facts = max(snapshots, key=lambda s: s[0])
    stored = token.processes_at
    if stored is not None and stored <= now and at <= stored:
        return
    NodeProcess.objects.filter(cluster_id=token.cluster_id, node=token.node).exclude(
        pid__in=[f.pid for f in facts]).delete()
    NodeProcess.objects.bulk_create(
        [NodeProcess(cluster_id=token.cluster_id, node=token.node, at=at, pid=f.pid,
                     create_time=f.create_time, ppid=f.ppid, title=f.title, state=f.state,
                     cpu_percent=f.cpu_percent, rss_bytes=f.rss_bytes, threads=f.threads)
         for f in facts],
        update_conflicts=True, unique_fields=["cluster", "node", "pid"],
        update_fields=["at", "create_time", "ppid", "title", "state", "cpu_percent",
                       "rss_bytes", "threads"])
    NodeToken.objects.filter(pk=token.pk).update(processes_at=at)
    token.processes_at = at


def _store_trial_logs(new: list[tuple[Report, list[Batch]]], now: datetime
                      ) -> list[IngestStats]:
    """The trial lines of the reports, through the trials app's store: one call per
    cluster the reporting nodes are in."""
    by_cluster: dict[int | None, list[TrialUpdate]] = {}
    for report, batches in new:
        lines = [u for b in batches for u in b.trial_logs]
        if lines:
            by_cluster.setdefault(report.token.cluster_id, []).extend(lines)
    return [store_updates(lines, now, cluster) for cluster, lines in by_cluster.items()]


def _push(stats: IngestStats) -> None:
    """Stored already: a push that fails loses a live update, not the results; then the
    detectors look at them (once committed), not a poll later."""
    if not stats.changed_trials:
        return
    transaction.on_commit(evaluate_soon)
    try:
        push_updates(stats)
    except Exception as exc:  # the page catches up at its next load or poll push
        log.warning("trial push after an agent report failed: %s", exc)

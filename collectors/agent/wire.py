"""The agent protocol's JSON (docs/agent-protocol.md), both ways: what the agent sends
and what the server reads back into typed records, strictly. Pure; no Django.

A record is a dict with a `kind`. Version 1 knows `gpu_poll`, `processes` and
`trial_log` (its own module, trialwire.py); other kinds are left to the server to skip
and count.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from collectors import pystack
from collectors.records import GpuPoll, GpuProcessRecord, GpuSampleRecord, ProcessFact

VERSION = 1
GPU_POLL, PROCESSES, TRIAL_LOG = "gpu_poll", "processes", "trial_log"
KINDS = (GPU_POLL, PROCESSES, TRIAL_LOG)  # what version 1 stores
SIGNAL, STACK = "signal", "stack"
COMMAND_KINDS = (SIGNAL, STACK)  # what a command may ask: a signal, or a py-spy dump
SIGNALS = ("SIGTERM", "SIGKILL")  # all a signal command may send
MAX_DETAIL_CHARS = 2000  # a command's result detail; a stack's may be as long as this:
MAX_STACK_CHARS = pystack.MAX_CHARS + 100  # (the dump, and the line that says it was cut)
MAX_BATCHES = 64  # per report request
MAX_BODY_BYTES = 2 * 1024 * 1024  # per request; Django's default upload limit is 2.5 MiB
# GpuSampleRecord fields that are the poll's, not the GPU's.
_POLL_FIELDS = ("node", "at", "simulated")
# What raywatch keeps of a field, checked here on every backend: SQLite ignores a
# column's max_length, and Postgres refusing a value costs a batch-by-batch retry.
# Strings: at most this many characters (by field name; others MAX_TEXT_CHARS).
_MAX_CHARS = {"uuid": 96, "name": 200, "type": 16, "title": 200, "state": 2,
              "driver_version": 64, "error": 2000}
MAX_TEXT_CHARS = 1024
MAX_LIST_ITEMS = 64  # gpu_poll.problems, a GPU's throttle_reasons
# A record's lists (issue 43, L6): more GPUs than any node has, more processes on a GPU
# or watched on a node than any node runs, are no reading.
MAX_GPUS = 64
MAX_GPU_PROCESSES = 1024
MAX_PROCESSES = 16384
MAX_ITEM_CHARS = 500
# Integers: within the column's range (by field name; others a signed 64-bit integer).
_INT32 = (-(2**31), 2**31 - 1)
_INT_RANGE = {"gpu_index": (0, 2**15 - 1), "pid": (0, _INT32[1]), "ppid": (0, _INT32[1]),
              "threads": (0, _INT32[1]), "sm_clock_mhz": _INT32, "memory_clock_mhz": _INT32}
_INT64 = (-(2**63), 2**63 - 1)
Clock = Callable[[datetime], datetime]  # an agent's time as raywatch's (ingest.AgentClock)


class WireError(ValueError):
    """The JSON does not have the protocol's shape; the message says where."""


# --- sending -----------------------------------------------------------------------------
def timestamp(at: datetime) -> str:
    return at.isoformat()


def encode_gpu_poll(poll: GpuPoll | None, at: datetime, error: str | None = None
                    ) -> dict[str, Any]:
    """One NVML poll; a poll that failed is sent too, with its `error` and no GPUs, so the
    server shows the source down with the reason."""
    if poll is None:  # cut to what raywatch keeps: a batch it refuses is lost
        return {"kind": GPU_POLL, "at": timestamp(at),
                "error": error[:_MAX_CHARS["error"]] if error else error, "gpus": [],
                "problems": [], "driver_version": None, "simulated": False}
    return {"kind": GPU_POLL, "at": timestamp(poll.at), "error": None,
            "driver_version": poll.driver_version, "simulated": poll.simulated,
            "problems": [p[:MAX_ITEM_CHARS] for p in poll.problems[:MAX_LIST_ITEMS]],
            "gpus": [_gpu(g) for g in poll.gpus]}


def _flat(record: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict, not copied deep (dataclasses.asdict deep-copies every
    GPU and process of every poll: a fifth of a busy agent's CPU once)."""
    return {name: getattr(record, name) for name in _field_names(type(record))}


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _gpu(record: GpuSampleRecord) -> dict[str, Any]:
    data = _flat(record)
    for name in _POLL_FIELDS:
        data.pop(name)
    data["index"] = data.pop("gpu_index")
    if record.throttle_reasons is not None:
        data["throttle_reasons"] = list(record.throttle_reasons)
    if record.processes is not None:
        data["processes"] = [{**_flat(p), "ancestors": list(p.ancestors)}
                             for p in record.processes]
    return data


def encode_processes(facts: tuple[ProcessFact, ...], at: datetime) -> dict[str, Any]:
    """A full snapshot of the processes the agent watches: one absent has ended."""
    return {"kind": PROCESSES, "at": timestamp(at),
            "processes": [_flat(f) for f in facts]}


def encode_batch(stream: str, seq: int, at: str, records: list[str]) -> bytes:
    """One batch of the spool: records already encoded as JSON, joined as they are."""
    head = json.dumps({"stream": stream, "seq": seq, "at": at}, separators=(",", ":"))
    return f'{head[:-1]},"records":[{",".join(records)}]}}'.encode()


def encode_report(batches: list[bytes], agent: dict[str, Any]) -> bytes:
    """A report's body, assembled from batches as spooled (valid JSON each)."""
    return b"".join([b'{"version":', str(VERSION).encode(), b',"batches":[',
                     b",".join(batches), b'],"agent":',
                     json.dumps(agent, separators=(",", ":")).encode(), b"}"])


# --- reading -----------------------------------------------------------------------------
def decode_time(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        raise WireError(f"{where}: expected an ISO 8601 time, got {type(value).__name__}")
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise WireError(f"{where}: {value[:40]!r} is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise WireError(f"{where}: the time has no UTC offset")
    return at


def decode_gpu_poll(record: dict[str, Any], node: str, clock: Clock | None = None
                    ) -> tuple[GpuPoll, str | None]:
    """A gpu_poll record as the GpuPoll of `node` (the token's), and its error if it failed.
    `clock` maps the agent's time to raywatch's."""
    at = decode_time(record.get("at"), "gpu_poll.at")
    at = clock(at) if clock is not None else at
    error = _text(record, "error", "gpu_poll")
    simulated = bool(_typed(record, "simulated", bool, "gpu_poll"))
    gpus = _bounded_list(record, "gpus", "gpu_poll", MAX_GPUS)
    problems = _strings(record, "problems", "gpu_poll") or ()
    poll = GpuPoll(
        node=node, at=at, simulated=simulated, problems=problems,
        driver_version=_text(record, "driver_version", "gpu_poll"),
        gpus=tuple(_decode_gpu(g, node, at, simulated, f"gpu_poll.gpus[{i}]")
                   for i, g in enumerate(gpus)))
    return poll, error


def _decode_gpu(data: Any, node: str, at: datetime, simulated: bool, where: str
                ) -> GpuSampleRecord:
    if not isinstance(data, dict):
        raise WireError(f"{where}: expected an object")
    fields = _scalars(GpuSampleRecord, {**data, "gpu_index": data.get("index")}, where,
                      skip=(*_POLL_FIELDS, "throttle_reasons", "processes"))
    reasons = _strings(data, "throttle_reasons", where)
    processes = _typed(data, "processes", list, where)
    if processes is not None and len(processes) > MAX_GPU_PROCESSES:
        raise WireError(f"{where}.processes: at most {MAX_GPU_PROCESSES}, got {len(processes)}")
    return GpuSampleRecord(
        node=node, at=at, simulated=simulated, **fields, throttle_reasons=reasons,
        processes=(tuple(_decode_process(p, f"{where}.processes[{i}]")
                         for i, p in enumerate(processes)) if processes is not None else None))


def _decode_process(data: Any, where: str) -> GpuProcessRecord:
    if not isinstance(data, dict):
        raise WireError(f"{where}: expected an object")
    ancestors = _typed(data, "ancestors", list, where) or []
    if len(ancestors) > MAX_LIST_ITEMS or not all(
            _CHECKS["int"](a) and _INT32[0] <= a <= _INT32[1] for a in ancestors):
        raise WireError(f"{where}.ancestors: expected a list of at most {MAX_LIST_ITEMS} pids")
    return GpuProcessRecord(**_scalars(GpuProcessRecord, data, where, skip=("ancestors",)),
                            ancestors=tuple(ancestors))


def decode_processes(record: dict[str, Any], clock: Clock | None = None
                     ) -> tuple[datetime, tuple[ProcessFact, ...]]:
    at = decode_time(record.get("at"), "processes.at")
    at = clock(at) if clock is not None else at
    listed = _bounded_list(record, "processes", "processes", MAX_PROCESSES)
    facts = []
    for i, data in enumerate(listed):
        if not isinstance(data, dict):
            raise WireError(f"processes.processes[{i}]: expected an object")
        facts.append(ProcessFact(**_scalars(ProcessFact, data, f"processes.processes[{i}]")))
    return at, tuple(facts)


# Annotation text (the records use postponed annotations) -> how to check the value.
# A float must be finite: Python's JSON reads NaN and Infinity, which no GPU reads and
# which would break every chart and comparison downstream.
_CHECKS: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: (isinstance(v, float) and math.isfinite(v))
    or (isinstance(v, int) and not isinstance(v, bool) and _INT64[0] <= v <= _INT64[1]),
    "bool": lambda v: isinstance(v, bool),
}
_EXPECTED = {"str": "a string", "int": "an integer", "float": "a finite number",
             "bool": "true or false"}


def _scalars(cls: type, data: dict[str, Any], where: str, skip: tuple[str, ...] = ()
             ) -> dict[str, Any]:
    """The scalar fields of dataclass `cls` from `data`, each checked against its type;
    a field that may be None may be missing, any other must be there."""
    out: dict[str, Any] = {}
    for name, kind, optional, nullable, default in _field_checks(cls):
        if name in skip:
            continue
        value = data.get(name, default if optional else None)
        if value is None and (optional or nullable):
            out[name] = None if nullable else default
            continue
        if not _CHECKS[kind](value):
            raise WireError(f"{where}.{name}: expected {_EXPECTED[kind]}, got {value!r:.40}")
        if kind in ("str", "int"):
            _bounded(name, value, where)
        out[name] = float(value) if kind == "float" else value
    return out


def _bounded(name: str, value: str | int, where: str) -> None:
    """A string or integer within what raywatch keeps of field `name`."""
    if isinstance(value, str):
        longest = _MAX_CHARS.get(name, MAX_TEXT_CHARS)
        if len(value) > longest:
            raise WireError(f"{where}.{name}: at most {longest} characters, got {len(value)}")
        return
    low, high = _INT_RANGE.get(name, _INT64)
    if not low <= value <= high:
        raise WireError(f"{where}.{name}: {value!r:.40} is not within {low}..{high}")


@functools.cache
def _field_checks(cls: type) -> tuple[tuple[str, str, bool, bool, Any], ...]:
    """Each field of `cls`: name, type, whether it may be missing, whether it may be
    None, its default. Read once a class: a server decodes thousands of GPUs a second."""
    checks = []
    for field in dataclasses.fields(cls):
        kind, _, rest = str(field.type).partition(" | ")
        optional = rest == "None" or field.default is not dataclasses.MISSING
        checks.append((field.name, kind, optional, rest == "None", field.default))
    return tuple(checks)


def _bounded_list(data: dict[str, Any], key: str, where: str, limit: int) -> list[Any]:
    items = _typed(data, key, list, where) or []
    if len(items) > limit:
        raise WireError(f"{where}.{key}: at most {limit} items, got {len(items)}")
    return items


def _typed(data: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = data.get(key)
    if value is not None and not isinstance(value, kind):
        raise WireError(f"{where}.{key}: expected {kind.__name__}")
    return value


def _text(data: dict[str, Any], key: str, where: str) -> str | None:
    value = _typed(data, key, str, where)
    if value is not None:
        _bounded(key, value, where)
    return value


def _strings(data: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    value = _typed(data, key, list, where)
    if value is not None and (len(value) > MAX_LIST_ITEMS or not all(
            isinstance(v, str) and len(v) <= MAX_ITEM_CHARS for v in value)):
        raise WireError(f"{where}.{key}: expected a list of at most {MAX_LIST_ITEMS} "
                        f"strings of at most {MAX_ITEM_CHARS} characters")
    return tuple(value) if value is not None else None


# --- commands ------------------------------------------------------------------------------
COMMAND_KEY_CONTEXT = b"raywatch-commands-v1"


def token_key(token: str) -> str:
    """What the server keeps in place of a token (SHA-256, hex), to look it up by."""
    return hashlib.sha256(token.encode()).hexdigest()


def command_key(token: str) -> str:
    """The key that signs the token's commands: HMAC-SHA256(token, COMMAND_KEY_CONTEXT),
    hex. The agent derives it from its token; raywatch derives it once, when it issues
    the token, and keeps it sealed (dashboard/agents/sealing.py). Nothing raywatch's
    database holds (the token's hash) gives it."""
    return hmac.new(token.encode(), COMMAND_KEY_CONTEXT, hashlib.sha256).hexdigest()


def sign_command(key: str, command: dict[str, Any]) -> str:
    body = {k: v for k, v in command.items() if k != "signature"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key.encode(), canonical, hashlib.sha256).hexdigest()


def signature_ok(key: str, command: dict[str, Any]) -> bool:
    given = command.get("signature")
    return isinstance(given, str) and hmac.compare_digest(given, sign_command(key, command))

"""The tail of a Ray worker's log files (its stdout and stderr: what a trial printed),
through the dashboard's log API, `GET /api/v0/logs/file` (what `ray logs actor` and
`ray.util.state.get_log` call). Ray finds the file on the worker's node through that
node's agent, by the actor's id (its current or past worker) or by pid on a node.

fetch_log_tail() does the I/O; ray_log_refusal() turns Ray's answer into a reason;
fatal_signal() reads how a worker's own stderr says a signal ended it.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

from collectors.http import SourceError, get_text
from collectors.raystate import RayEndpoint

MAX_LINES = 2000
MAX_BYTES = 1 << 20
SUFFIXES = ("out", "err")


def fetch_log_tail(endpoint: RayEndpoint, suffix: str, lines: int, *, actor_id: str = "",
                   pid: int | None = None, node_id: str = "", node_ip: str = "") -> str:
    """The last `lines` lines of the worker's .out or .err file. An actor id finds the
    file by itself; a pid needs its node (id or address). SourceError with Ray's reason
    when Ray cannot give it."""
    if suffix not in SUFFIXES or not 0 < lines <= MAX_LINES:
        raise ValueError(f"suffix in {SUFFIXES}, lines from 1 to {MAX_LINES}")
    where: dict[str, str | int]
    if actor_id:
        where = {"actor_id": actor_id}
    elif pid is not None and (node_id or node_ip):
        where = {"pid": pid, **({"node_id": node_id} if node_id else {"node_ip": node_ip})}
    else:
        raise ValueError("an actor id, or a pid with its node")
    query = urlencode({**where, "lines": lines, "suffix": suffix, "filter_ansi_code": "true",
                       "timeout": max(1, int(endpoint.timeout_s))})
    try:
        return get_text(f"{endpoint.dashboard_url}/api/v0/logs/file?{query}",
                        headers=endpoint.headers(), timeout=endpoint.timeout_s,
                        max_bytes=MAX_BYTES)
    except SourceError as exc:
        raise SourceError(endpoint.scrub(ray_log_refusal(exc)), status=exc.status) from None


# How a Ray worker's stderr says a fatal signal ended it (read on Ray 2.60, a WorkerDict
# that dereferenced NULL): Ray's own handler logs "*** SIGSEGV received at time=… ***",
# then Python's faulthandler "Fatal Python error: Segmentation fault" and the Python
# stack, most recent call first. A SIGKILL (the kernel's OOM killer, `ray stop --force`)
# cannot be handled: it leaves none of this (docs/ray-facts.md, "Why a run ended").
CRASH_LINES = 200  # the lines of a worker's .err asked for, from its end
_SIGNAL = re.compile(r"\*\*\* (SIG[A-Z]{2,6}) received at time=")
_FATAL = re.compile(r"Fatal Python error: ([^\n]{1,120})")
_FRAME = re.compile(r'File "([^"\n]{1,500})", line (\d{1,9}) in ([^\s]{1,200})')
NO_SIGNAL = ("its log shows no fatal signal: SIGKILL (the kernel's OOM killer, or "
             "ray stop --force) or an abrupt exit")


def fatal_signal(err_tail: str) -> str | None:
    """What a worker's stderr tail says ended it: "SIGSEGV (Segmentation fault) in
    generate (rollout.py:95)", the frame the faulthandler names first; None when it
    shows no fatal signal."""
    signals = _SIGNAL.findall(err_tail)
    fatal = next(reversed(list(_FATAL.finditer(err_tail))), None)  # the last
    if not signals and fatal is None:
        return None
    name = signals[-1] if signals else "a fatal signal"
    words = f"{name} ({fatal.group(1).strip()})" if fatal is not None else name
    frames = []
    if fatal is not None:
        # With several threads, faulthandler dumps the others first ("Thread 0x…") and
        # the one that crashed last, as "Current thread 0x…"; with one, "Stack".
        header = _CURRENT.search(err_tail, fatal.end()) or _HEADER.search(err_tail,
                                                                           fatal.end())
        start = header.end() if header is not None else fatal.end()
        end = _NEXT_THREAD.search(err_tail, start)
        frames = [m.groups() for m in _FRAME.finditer(
            err_tail, start, end.start() if end is not None else len(err_tail))][:64]
    if frames:
        words += f" in {_frame(frames[0])}"
        # Python's own library as the innermost frame (ctypes, a lock): the caller says more.
        if _STDLIB.search(frames[0][0]):
            caller = next((f for f in frames[1:] if not _STDLIB.search(f[0])), None)
            if caller is not None:
                words += f" from {_frame(caller)}"
    return words


_CURRENT = re.compile(r"Current thread 0x[0-9a-f]+ \(most recent call first\):")
_HEADER = re.compile(r"(?:Stack|Thread 0x[0-9a-f]+) \(most recent call first\):")
_NEXT_THREAD = re.compile(r"\n(?:Thread|Current thread) 0x[0-9a-f]+ \(most recent call first\)"
                          r"|\n\n(?!  File )")
_STDLIB = re.compile(r"/lib/python3\.\d+/(?!site-packages/|dist-packages/)")


def _frame(frame: tuple[str, str, str]) -> str:
    path, line, function = frame
    return f"{function} ({path.rsplit('/', 1)[-1]}:{line})"


def ray_log_refusal(exc: SourceError) -> str:
    if exc.status == 401 or exc.auth:
        return "Ray's dashboard refused raywatch's token for its log API"
    if exc.status is not None:
        return f"Ray's log API answered {exc.status}: {_first_line(exc.body)}"
    return f"Ray's dashboard: {exc.message}"


def _first_line(body: str) -> str:
    """Ray's reason, e.g. 'Actor ID … not found.' or 'Could not find a log file. …'
    (the options it lists on the lines after are raywatch's own)."""
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("<", "Traceback", "File "))]
    return (useful[0] if useful else "no reason given")[:300]

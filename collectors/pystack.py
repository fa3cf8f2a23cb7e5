"""A Python process's stack, as py-spy dumps it (`py-spy dump --pid N`), read on the
process's own node: by the node agent, or by raywatch for a process on its own host.

py-spy reads the process's memory through ptrace: it needs root, the process's user
(where the kernel allows it) or, in a container, SYS_PTRACE and the host's pids. When
it cannot, the dump says why in words an operator can act on. No Django.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 10.0
MAX_CHARS = 64_000  # a dump of a few hundred threads; more is cut, and says so
INSTALL = "pip install py-spy==0.4.3 (ray[default] ships it)"
NO_PTRACE = ("ptrace is not allowed: run the agent as root or as the process's user; in "
             "a container it needs SYS_PTRACE (docker: cap_add: [SYS_PTRACE]) and the "
             "host's pids (pid: host)")


@dataclass(frozen=True)
class StackDump:
    text: str | None  # py-spy's dump, when it was taken
    reason: str | None = None  # why it was not


def find_py_spy(configured: str | None = None) -> str | None:
    """The py-spy to run: the configured path, else the one beside this Python (a venv's
    bin is often not on PATH), else the one on PATH."""
    if configured:
        return configured
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def dump_stack(pid: int, py_spy: str | None = None, timeout_s: float = TIMEOUT_S,
               max_chars: int = MAX_CHARS) -> StackDump:
    exe = find_py_spy(py_spy)
    if exe is None:
        return StackDump(None, f"py-spy is not installed on this node: {INSTALL}")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return StackDump(None, f"py-spy was not found at {exe}: {INSTALL}")
    try:
        done = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True,
                              text=True, errors="replace", timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return StackDump(None, f"py-spy did not finish within {timeout_s:g} s")
    except OSError as exc:
        return StackDump(None, f"py-spy could not be run ({exe}): {exc.strerror}")
    if done.returncode != 0 or not done.stdout.strip():
        return StackDump(None, explain(done.stderr or done.stdout, pid))
    return StackDump(capped(done.stdout, max_chars))


def explain(said: str, pid: int) -> str:
    """py-spy's failure (its stderr), as the reason a stack was not taken."""
    lowered = said.lower()
    if "permission denied" in lowered or "operation not permitted" in lowered:
        return f"py-spy may not read process {pid}: {NO_PTRACE}"
    if "failed to find python version" in lowered:
        return f"process {pid} does not look like a Python process to py-spy"
    if "check that the process is running" in lowered or "no such process" in lowered:
        return f"process {pid} has ended"
    first = next((line.strip() for line in said.splitlines() if line.strip()), "")
    return f"py-spy failed on process {pid}: {first[:300] or 'no output'}"


def capped(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n… cut at {max_chars} of {len(text)} characters\n"

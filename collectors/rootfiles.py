"""Opening a file found under a log root, as untrusted input.

Whoever can write in a log root (any trainable, any user of the cluster) chooses what is
there, and the node agent runs as root with the host's pids: an error.txt that links to
/proc/self/environ would send the agent's node token to the dashboard and on to Slack. So
every reader of the roots opens its files here, and gets the open file or `Refused` (an
OSError) with a reason that is shown as that trial's problem:

- a symbolic link is not followed (O_NOFOLLOW), wherever it points;
- only a regular file is read. The open does not wait (O_NONBLOCK), so a FIFO is refused
  at once instead of hanging the reader, as are devices and sockets;
- a file over its cap is refused whole, not read in part;
- the opened file's real path lies inside the root's: a directory on the way that became
  a link after the walk (collectors.logscan enters no linked directory) leads nowhere;
- a file with more than one hard link is refused: a job can link a file it may read into
  a root (another user's file, or one raywatch alone should see), and no logger writes
  one;
- a root reached through a symbolic link (`~/ray_results` moved to a bigger disk) is read
  only where the link's owner also owns what it leads to, or the link is root's: a job
  that can replace `~/ray_results` or a session's `artifacts` with a link cannot point
  the reader at another user's or the system's files (linked_root_refusal).

No Django here: raywatch's settings and the agent's config hand in the caps.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# The defaults of RAYWATCH_LOG_FILE_MAX_MB and RAYWATCH_LOG_JSON_FILE_MAX_MB.
LOG_FILE_MAX_MB = 4096  # read in pieces (result.json, event files) or by its head
JSON_FILE_MAX_MB = 64  # parsed whole: params.json, experiment_state-*.json
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


class Refused(OSError):
    """A file that is not read, and why."""


@dataclass(frozen=True)
class Caps:
    """The largest file read, in bytes: a larger one is refused."""

    log_bytes: int = LOG_FILE_MAX_MB << 20  # result.json, event files, error.txt, tuner.pkl
    json_bytes: int = JSON_FILE_MAX_MB << 20  # params.json, experiment_state-*.json

    @classmethod
    def mb(cls, log_mb: int, json_mb: int) -> Caps:
        return cls(log_mb << 20, json_mb << 20)


DEFAULT_CAPS = Caps()


@dataclass(frozen=True)
class Root:
    """A log root as its files are held to it: its real path, and the caps."""

    real: str
    caps: Caps = DEFAULT_CAPS

    @classmethod
    def of(cls, path: str | Path, caps: Caps = DEFAULT_CAPS) -> Root:
        return cls(os.path.realpath(path), caps)


def open_file(path: str | Path, root: Root | None, cap: int) -> BinaryIO:
    """`path` open for reading from its start, or Refused; FileNotFoundError (an OSError
    like the others) when it is gone. `root`: where it was found (None: its own directory,
    which then is all that is checked of where it lies)."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(errno.ELOOP, "is a symbolic link: not followed") from None
        if exc.errno == errno.ENXIO:  # what opening a socket answers
            raise Refused(errno.ENXIO, "is a socket, not a regular file: not read") from None
        raise
    try:
        _check(fd, str(path), root, cap)
    except BaseException:
        os.close(fd)
        raise
    # O_NONBLOCK means nothing to a regular file's reads. open(fd): os.fdopen costs twice.
    return open(fd, "rb")


def read_file(path: str | Path, root: Root | None, cap: int, size: int = -1) -> bytes:
    """A file held to `cap`, whole or its first `size` bytes; or an OSError (Refused)."""
    with open_file(path, root, cap) as handle:
        return handle.read(size)


def storable(text: str) -> str:
    """Text from a file as Postgres stores it: no NUL, no lone surrogate (JSON's \\ud800
    escapes make them; they become "?")."""
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text.replace("\x00", "")


def problem_text(exc: OSError) -> str:
    """A refusal or a failed open, as a trial's problem says it."""
    return exc.strerror if isinstance(exc, Refused) else f"cannot read: {exc.strerror or exc}"


def _check(fd: int, path: str, root: Root | None, cap: int) -> None:
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode):
        kind = next((name for test, name in _KINDS if test(found.st_mode)), "not a file")
        raise Refused(errno.EINVAL, f"is {kind}, not a regular file: not read")
    if found.st_nlink > 1:
        raise Refused(errno.EMLINK, f"has {found.st_nlink} hard links: not read (a link can "
                                    "bring in a file from outside its log root)")
    if found.st_size > cap:
        raise Refused(errno.EFBIG, f"is {found.st_size:,} bytes, over the cap of "
                                   f"{_size(cap)}: not read")
    inside = root.real if root else os.path.realpath(os.path.dirname(path) or ".")
    if not _real_path(fd, path).startswith(inside.rstrip(os.sep) + os.sep):
        raise Refused(errno.EXDEV, "lies outside its log root: not read")


def _real_path(fd: int, path: str) -> str:
    """Where the open file really is: Linux names it in /proc, whatever links led there."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def _size(cap: int) -> str:
    return f"{cap >> 20:,} MiB" if cap >= 1 << 20 and not cap % (1 << 20) else f"{cap:,} bytes"


def linked_root_refusal(path: str | Path) -> str | None:
    """Why the root `path` is not read, or None: a symbolic link on its way (itself or a
    directory above it) whose owner, not root, does not own what the link leads to."""
    absolute = os.path.abspath(path)
    parts = absolute.split(os.sep)
    for end in range(2, len(parts) + 1):
        here = os.sep.join(parts[:end]) or os.sep
        try:
            link = os.lstat(here)
            if not stat.S_ISLNK(link.st_mode):
                continue
            target = os.path.realpath(here)
            owner = os.stat(target).st_uid
        except OSError:
            return None  # not there (yet): nothing to read, nothing to refuse
        if link.st_uid not in (0, owner):
            return (f"{here} is a symbolic link of uid {link.st_uid} to {target}, which uid "
                    f"{owner} owns: the log root is not read")
    return None

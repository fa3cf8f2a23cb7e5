"""Which Ray sessions' live trial copies are read: those a running Ray process names.

A node's Ray temp dir keeps the session of every earlier Ray start, with Tune states a
killed driver left at RUNNING; reading them would bring back trials long gone (and
their storage copy is in ~/ray_results anyway)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from collectors import logscan
from collectors.localray import LocalCluster
from collectors.logscan import default_log_dirs

pytestmark = pytest.mark.ray


def test_only_sessions_a_running_ray_names_are_read(ray_cluster: LocalCluster,
                                                     tmp_path: Path) -> None:
    logscan._LIVE.clear()
    live = Path(ray_cluster.session_dir).resolve()
    roots = [r.resolve() for r in default_log_dirs(tmp_path, live.parent)]
    assert live / "artifacts" in roots

    earlier = tmp_path / "ray" / "session_2026-01-01_00-00-00_000000_1"
    earlier.mkdir(parents=True)
    (tmp_path / "ray" / "session_latest").symlink_to(earlier)
    assert default_log_dirs(tmp_path, tmp_path / "ray") == [tmp_path / "ray_results"]


def test_every_session_when_no_ray_process_is_visible(tmp_path: Path) -> None:
    # A container that does not share the host's pids sees no Ray process: read them all.
    logscan._LIVE[:] = [(time.monotonic(), frozenset())]
    try:
        earlier = tmp_path / "ray" / "session_2026-01-01_00-00-00_000000_1"
        earlier.mkdir(parents=True)
        assert default_log_dirs(tmp_path, tmp_path / "ray") == [
            tmp_path / "ray_results", earlier / "artifacts"]
    finally:
        logscan._LIVE.clear()

"""A node agent outlives its node's disk: with its spool's filesystem full, or its spool
directory gone, it keeps collecting and reporting (holding batches in memory), the
Cluster page's coverage says what is wrong, and once the disk has room again the
problem goes. Before, the first failed write ended its collecting loop while its
commands long-poll kept the node looking connected."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.agents import tokens
from dashboard.agents.coverage_data import coverage_payload
from dashboard.gpus.models import GpuSample
from tests.agents import agent_env, running_agent
from tests.conftest import LiveServer, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
NODE, NODE_IP = "gpu-b", "10.9.0.3"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB filesystem of its own (a tmpfs: needs root)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


class Full:
    """The filesystem kept full: written until it says so, and again whenever something
    frees room (the agent deletes each batch once raywatch has it, and the next batch
    would fit where the last one was). `unlink()` stops and gives the room back."""

    def __init__(self, disk: Path) -> None:
        self.path = disk / "filler"
        self.out = self.path.open("wb", buffering=0)
        self.done = threading.Event()
        self._fill()
        self.thread = threading.Thread(target=self._keep_full, daemon=True)
        self.thread.start()

    def _fill(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.out.write(b"\0" * 512)

    def _keep_full(self) -> None:
        while not self.done.wait(0.01):
            self._fill()

    def unlink(self) -> None:
        self.done.set()
        self.thread.join()
        self.out.close()
        self.path.unlink()


def lose(spool: Path) -> Path:
    """The spool directory removed, a file in its place (a cleanup script, a bad mount)."""
    shutil.rmtree(spool)
    spool.write_text("not a directory")
    return spool


def agent_problems() -> list[str]:
    agents = coverage_payload(timezone.now())["agent_only"]
    return agents[0]["problems"] if agents else []


@pytest.mark.parametrize("fault", ["disk full", "spool lost"])
def test_an_agent_keeps_reporting_when_its_spool_cannot_be_written(
        live_server_asgi: LiveServer, tmp_path: Path, small_disk: Path, fault: str) -> None:
    _, token = tokens.issue(NODE, None, timezone.now(), NODE_IP)
    spool = small_disk / "spool"
    env = agent_env(live_server_asgi.url, token, tmp_path, NODE, NODE_IP,
                    RAYWATCH_AGENT_SPOOL=str(spool))
    log = tmp_path / "agent.log"
    with running_agent(env, log) as agent:
        wait_for(lambda: GpuSample.objects.count() >= 4, 60, 0.3, "the agent's reports",
                 explain=lambda: log.read_text()[-2000:])
        broken = Full(small_disk) if fault == "disk full" else lose(spool)
        try:
            said = wait_for(
                lambda: [p for p in agent_problems() if "cannot write its spool" in p],
                30, 0.3, "the coverage to say the spool cannot be written",
                explain=lambda: (agent_problems(), log.read_text()[-2000:]))
            then = GpuSample.objects.count()
            wait_for(lambda: GpuSample.objects.count() >= then + 2 * 5, 30, 0.3,
                     "five more polls of its two GPUs, reported from memory",
                     explain=lambda: log.read_text()[-2000:])
        finally:  # room again (or the directory free to be made again); a failed wait
            broken.unlink()  # above leaves no filler thread writing until pytest ends
        wait_for(lambda: not agent_problems(), 30, 0.3, "the problem to go",
                 explain=agent_problems)
        again = GpuSample.objects.count()
        wait_for(lambda: GpuSample.objects.count() >= again + 2 * 3, 30, 0.3,
                 "polls spooled on disk again")
        assert agent.poll() is None
    assert "in memory" in said[0] and str(spool) in said[0]
    assert any(spool.glob("*")) or fault == "spool lost"

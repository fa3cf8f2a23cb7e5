"""The agent's spool numbers its batches so that raywatch stores each once: a batch that
raywatch already acknowledged must never see its seq handed to a new batch, or raywatch
would call the new one a duplicate and drop it. The seqs are reserved a block at a time
(the state file is written once a block); these tests kill the agent's spool mid-block."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from collectors.agent.spool import Spool
from tests.agents import agent_env, running_agent
from tests.patience import patient
from tests.receivers import JsonHandler, serve

# A spool process that appends `n` batches, removes them as an acknowledging raywatch
# would, prints the last seq and dies without closing (as a power cut or SIGKILL would).
CRASH = """
import os, sys
from pathlib import Path
from collectors.agent.spool import Spool
spool = Spool(Path(sys.argv[1]), 1 << 20)
seqs = [spool.append([{"kind": "gpu_poll", "n": i}], "2026-11-24T00:00:00+00:00")
        for i in range(int(sys.argv[2]))]
spool.remove(seqs)
print(seqs[-1], flush=True)
os._exit(0)
"""


def crashed_after(root: Path, batches: int) -> int:
    out = subprocess.run([sys.executable, "-c", CRASH, str(root), str(batches)], check=True,
                         capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    return int(out.stdout.split()[-1])


def test_a_spool_that_died_mid_block_never_reuses_a_seq(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    last = crashed_after(root, 3)  # acknowledged and deleted: nothing on disk names them
    assert not list(root.glob("*.batch.json"))
    last = max(last, crashed_after(root, 300))  # past one block, then dead again
    spool = Spool(root, 1 << 20)
    try:
        seq = spool.append([{"kind": "gpu_poll"}], "2026-11-24T00:00:01+00:00")
        stream = spool.stream
    finally:
        spool.close()
    assert seq > last
    assert json.loads((root / "state.json").read_text())["stream"] == stream  # same stream


def test_a_clean_stop_gives_back_the_rest_of_its_block(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    spool = Spool(root, 1 << 20)
    first = [spool.append([{"n": i}], "2026-11-24T00:00:00+00:00") for i in range(3)]
    spool.close()
    again = Spool(root, 1 << 20)
    try:
        assert again.append([{"n": 3}], "2026-11-24T00:00:00+00:00") == first[-1] + 1
        assert [b["seq"] for b in again.oldest(10, 1 << 20)] == [*first, first[-1] + 1]
    finally:
        again.close()


class _SlowRaywatch(JsonHandler):
    """raywatch answering a report only after HOLD_S (stored at once, as it commits before
    it answers); every other call 503 (the agent's commands loop waits it out). What it
    stored, and when a report arrived, are its server's, set by each test."""

    HOLD_S = 3.0

    def do_POST(self) -> None:
        body = self.body()
        if not self.path.endswith("/report"):
            return self.answer({"detail": "not here"}, 503)
        seqs = [batch["seq"] for batch in json.loads(body)["batches"]]
        self.server.stored.extend(seqs)  # type: ignore[attr-defined]
        self.server.arrived.set()  # type: ignore[attr-defined]
        time.sleep(self.HOLD_S)
        self.answer({"stored": seqs, "duplicate": []})

    def do_GET(self) -> None:
        self.answer({"detail": "not here"}, 503)


def test_an_agent_stopped_while_a_report_is_on_its_way_keeps_none_raywatch_stored(
        tmp_path: Path) -> None:
    """SIGTERM while raywatch is still answering a report: the agent waits for that answer
    and drops the batches raywatch stored from its spool, so its next start resends none
    of them (they would be counted as sent twice, and cost a report)."""
    server = serve(_SlowRaywatch)
    server.stored, server.arrived = [], threading.Event()  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env = agent_env(url, "rwa_" + "x" * 40, tmp_path, "gpu-s", "10.9.0.9")
    spool = Path(env["RAYWATCH_AGENT_SPOOL"])
    try:
        with running_agent(env, tmp_path / "agent.log") as agent:
            assert server.arrived.wait(patient(60)), (tmp_path / "agent.log").read_text()
            agent.send_signal(signal.SIGTERM)  # raywatch has the report, not yet answered
            assert agent.wait(patient(30)) == 0
    finally:
        server.shutdown()
        server.server_close()
    left = {int(p.name.removesuffix(".batch.json")) for p in spool.glob("*.batch.json")}
    assert server.stored and not left & set(server.stored), (server.stored, left)

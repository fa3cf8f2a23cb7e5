"""The agent's spool numbers its batches so that raywatch stores each once: a batch that
raywatch already acknowledged must never see its seq handed to a new batch, or raywatch
would call the new one a duplicate and drop it. The seqs are reserved a block at a time
(the state file is written once a block); these tests kill the agent's spool mid-block."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from collectors.agent.spool import Spool

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

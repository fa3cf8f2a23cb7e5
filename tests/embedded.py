"""Run test files again on the embedded default's database: SQLite, the in-memory
channel layer and the in-process background pool (no DATABASE_URL, no REDIS_URL),
which is what `make run` uses. The suite itself runs on Postgres and Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pytest_on_embedded_default(data_dir: Path, *targets: str,
                               timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["RAYWATCH_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s,
    )

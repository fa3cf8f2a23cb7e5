"""The directories raywatch's own collector reads for Tune and TensorBoard logs."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings

from collectors.logscan import default_log_dirs


def log_roots() -> list[Path]:
    if settings.LOG_DIRS:
        return [Path(p).expanduser() for p in settings.LOG_DIRS]
    roots = default_log_dirs(Path.home(), settings.RAY_TMP_DIR)
    try:  # the cluster `make run` started may live outside RAYWATCH_RAY_TMP_DIR
        session = Path(json.loads(settings.LOCAL_RAY_FILE.read_text())["session_dir"])
        if session / "artifacts" not in roots:
            roots.append(session / "artifacts")
    except (OSError, ValueError, KeyError):
        pass
    return roots

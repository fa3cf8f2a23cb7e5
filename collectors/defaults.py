"""Defaults that raywatch's server (dashboard/settings.py) and the node agent
(collectors/agent/config.py) share, each written once here and read by both, so the two
cannot drift apart.

Plain values and no imports: the agent reads this without Django, settings.py without
pulling in the collectors, and dashboard/settingsdoc.py parses it (it imports nothing)
for docs/settings.md.
"""

from __future__ import annotations

# RAYWATCH_POLL_GPU_S: seconds between GPU polls of a node.
POLL_GPU_S = 1.0
# RAYWATCH_GPU_SOURCE: what reads the GPUs, and its default.
GPU_SOURCES = ("nvml", "simulated", "off")
GPU_SOURCE = "nvml"
# RAYWATCH_NVML_MODULE: the module the NVML source imports (tests put a fake there).
NVML_MODULE = "pynvml"
# RAYWATCH_RAY_TMP_DIR: Ray's temp dir, whose sessions' live driver_artifacts are read.
RAY_TMP_DIR = "/tmp/ray"
# RAYWATCH_LOG_QUIET_S, RAYWATCH_LOG_RESCAN_S: a finished trial's directory quiet this
# long leaves the every-poll checks; the slow rescan visits each such one once a period.
LOG_QUIET_S = 60.0
LOG_RESCAN_S = 300.0
# RAYWATCH_LOG_RESCAN_PER_POLL: the most quiet trial dirs the slow rescan checks in one
# poll. A quiet trial dir costs ~5 us to rescan (a stat of it, its result.json and any
# error.txt): 100 a poll is ~0.5 ms, whatever the history (bench/history_scale_bench.py).
LOG_RESCAN_PER_POLL = 100

"""Every kind of incident raywatch's detectors open, for the pages that offer a choice
of them (silences, channel routes)."""

from __future__ import annotations

from dashboard.incidents.resource_rules import GPU_KINDS, RAY_KINDS
from dashboard.incidents.trial_rules import TRIAL_KINDS

KINDS = (*TRIAL_KINDS, *GPU_KINDS, *RAY_KINDS)
# Globs that take a family of kinds at once, and what they take.
FAMILIES = {prefix + "_*": tuple(k for k in KINDS if k.startswith(prefix + "_"))
            for prefix in ("trial", "gpu", "demand")}

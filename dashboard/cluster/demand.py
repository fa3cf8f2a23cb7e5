"""Why is it pending? Pure reasoning over one demand and the alive nodes: could any
node ever fit it (infeasible otherwise), and if it could, who holds what it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeCapacity:
    node_id: str
    node_ip: str
    total: dict[str, float]
    used: dict[str, float] = field(default_factory=dict)

    def free(self, name: str) -> float:
        return self.total.get(name, 0.0) - self.used.get(name, 0.0)


@dataclass(frozen=True)
class Holder:
    """Something that holds resources on a node: an actor (a trial) or a placement group.
    `trial`: raywatch watches it as a trial (its own detectors say when it hangs)."""

    label: str
    node_id: str
    resources: dict[str, float]
    job_id: str = ""
    trial: bool = False


@dataclass(frozen=True)
class Verdict:
    feasible: bool | None
    explanation: str
    blockers: list[dict] = field(default_factory=list)
    # It waits only behind trials of its own job: a search with more trials than room
    # queues them, by design. Not a fault; a stuck trial ahead is the trial detectors'.
    queued: bool = False
    # What the Pending page says above its list of the blockers: the explanation without
    # the names the list shows (with their nodes' links) anyway.
    lead: str = ""


def base_resources(bundle: dict[str, float]) -> dict[str, float]:
    """Plain resource names: a placement group's bundle resources (CPU_group_<pg>,
    CPU_group_0_<pg>) count as the resource they reserve; node: and bundle markers go."""
    out: dict[str, float] = {}
    for name, amount in bundle.items():
        if name.startswith("node:") or name.startswith("bundle_group"):
            continue
        base = name.split("_group_", 1)[0]
        out[base] = max(out.get(base, 0.0), float(amount))
    return out


def fits(bundle: dict[str, float], node: NodeCapacity) -> bool:
    return all(node.total.get(name, 0.0) >= amount for name, amount in bundle.items())


def could_fit(bundles: Sequence[dict[str, float]], strategy: str | None,
              nodes: Sequence[NodeCapacity]) -> bool:
    """Whether the cluster as it stands could ever place this, with nothing else running."""
    if strategy == "STRICT_PACK":
        return any(fits(_sum(bundles), n) for n in nodes)
    if strategy == "STRICT_SPREAD":
        return _spread(bundles, nodes)
    return all(any(fits(b, n) for n in nodes) for b in bundles)


def _sum(bundles: Sequence[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        for name, amount in bundle.items():
            total[name] = total.get(name, 0.0) + amount
    return total


def _spread(bundles: Sequence[dict[str, float]], nodes: Sequence[NodeCapacity]) -> bool:
    """Each bundle on its own node (greedy, largest bundles first)."""
    free = list(nodes)
    for bundle in sorted(bundles, key=lambda b: -sum(b.values())):
        node = next((n for n in free if fits(bundle, n)), None)
        if node is None:
            return False
        free.remove(node)
    return True


def judge(bundles: Sequence[dict[str, float]], strategy: str | None, ray_infeasible: bool | None,
          nodes: Sequence[NodeCapacity], holders: Sequence[Holder], job_id: str | None = None
          ) -> Verdict:
    plain = [base_resources(b) for b in bundles]
    if not nodes:
        return Verdict(None, "no alive node is known")
    if ray_infeasible or not could_fit(plain, strategy, nodes):
        return Verdict(False, _why_infeasible(plain, strategy, nodes))
    candidates = [n for n in nodes if any(fits(b, n) for b in plain)]
    wanted = {name for b in plain for name in b}
    blockers = _blockers(candidates, holders, wanted)
    # Behind its own job's trials only, it is that search's queue moving: also in the
    # poll or two after a trial ends and before Ray places the next one ("free now").
    queued = bool(blockers) and bool(job_id) and all(
        b["trial"] and b["job_id"] == job_id for b in blockers)
    free_now = [n for n in candidates if all(n.free(k) >= v for b in plain for k, v in b.items())]
    if free_now:
        where = ", ".join(n.node_ip for n in free_now[:3])
        said = f"resources are free now on {where}; Ray has not placed it yet"
        return Verdict(True, said, blockers, queued, said)
    if not blockers:
        return Verdict(True, f"fits on {len(candidates)} node(s) once resources free up")
    named = "; ".join(f"{b['label']} ({_shape(b['resources'])} on {b['node_ip']})"
                      for b in blockers[:5])
    more = f" and {len(blockers) - 5} more" if len(blockers) > 5 else ""
    lead = "queued behind its own job's trials:" if queued else "waits for resources held by:"
    said = lead if queued else lead.removesuffix(":")  # in a sentence the names follow "by"
    return Verdict(True, f"{said} {named}{more}", blockers, queued, lead)


def _why_infeasible(bundles: Sequence[dict[str, float]], strategy: str | None,
                    nodes: Sequence[NodeCapacity]) -> str:
    asked = _sum(bundles) if strategy == "STRICT_PACK" else {
        k: max(b.get(k, 0.0) for b in bundles) for b in bundles for k in b}
    reasons = []
    for name, amount in sorted(asked.items()):
        largest = max(n.total.get(name, 0.0) for n in nodes)
        if largest < amount:
            reasons.append(f"{name}: asks {amount:g}, largest node has {largest:g}"
                           if largest else f"{name}: asks {amount:g}, no node has any")
    if not reasons and strategy == "STRICT_SPREAD":
        reasons.append(f"STRICT_SPREAD needs {len(bundles)} distinct nodes that fit a bundle")
    if not reasons and strategy == "STRICT_PACK":
        reasons.append("STRICT_PACK needs every bundle on one node and no node fits them all")
    return "; ".join(reasons) or "Ray reports it infeasible"


def _blockers(candidates: Sequence[NodeCapacity], holders: Sequence[Holder],
              wanted: set[str]) -> list[dict]:
    ips = {n.node_id: n.node_ip for n in candidates}
    found = []
    for holder in holders:
        if holder.node_id not in ips:
            continue
        held = {k: v for k, v in base_resources(holder.resources).items() if k in wanted and v}
        if held:
            found.append({"label": holder.label, "node_id": holder.node_id,
                          "node_ip": ips[holder.node_id], "resources": held,
                          "job_id": holder.job_id, "trial": holder.trial})
    return sorted(found, key=lambda b: (-sum(b["resources"].values()), b["label"]))


def _shape(bundle: dict[str, float]) -> str:
    return ", ".join(f"{k}: {v:g}" for k, v in sorted(bundle.items()))

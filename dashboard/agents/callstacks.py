"""An overdue Ray call's process, looked at by its node's agent: SAMPLES py-spy stacks
GAP_S apart (a `stack` command each, as a stalled trial's), then the verdict they give
with the CPU the agent last saw the process use and the GPUs it holds
(collectors/pystack.hang_verdict): hung in a frame, waiting on something, or slow and
busy there. Registered with dashboard.cluster.callstacks in AgentsConfig.ready()."""

from __future__ import annotations

import time

from django.db import transaction
from django.utils import timezone

from collectors.pystack import Verdict, hang_verdict
from dashboard.agents.commands import create_stack, wait_for_answer
from dashboard.agents.models import NodeProcess
from dashboard.agents.remote import node_with_agent
from dashboard.cluster.models import CallStack, Node, RayCall
from dashboard.gpus.models import GpuProcess

# Three stacks two seconds apart: a stack that stays put across them, with CPU and GPUs
# idle, is hung; with the agent's answers this takes about ten seconds, inside the minute
# the issue allows from the hang to its verdict.
SAMPLES = 3
GAP_S = 2.0


def take(pk: int) -> None:
    """Take the stacks of the call this row names, store them and the verdict."""
    row = CallStack.objects.select_related("cluster").filter(pk=pk).first()
    if row is None or row.state != CallStack.PENDING:
        return
    fields = sample(row)
    with transaction.atomic():
        CallStack.objects.filter(pk=pk, state=CallStack.PENDING).update(
            taken_at=timezone.now(), **fields)


def sample(row: CallStack) -> dict[str, object]:
    call = RayCall.objects.filter(cluster=row.cluster, task_id=row.task_id).first()
    node = Node.objects.filter(cluster=row.cluster, node_id=call.node_id).first() \
        if call else None
    agent = node_with_agent(row.node_ip, node.hostname if node else "", row.cluster.name)
    if agent is None:
        return failed(f"node {row.node_ip or 'of the call'} has no raywatch agent to take "
                      "its stack")
    fact = NodeProcess.objects.filter(cluster=row.cluster, node=agent, pid=row.pid).first()
    if fact is None:
        return failed(f"the agent of {agent} does not list pid {row.pid}: it ended, or is "
                      "no Ray worker")
    dumps, problem = sample_process(row.cluster_id, row.cluster.name, agent, row.pid,
                                    fact.create_time)
    if not dumps:
        return failed(problem or "no stack came back")
    verdict = verdict_of(dumps, row.name.rsplit(".", 1)[-1], row.cluster_id, agent, row.pid,
                         row.node_ip)
    common = {"state": CallStack.TAKEN, "source": f"py-spy by the agent of {agent}",
              "text": dumps[-1], "samples": len(dumps), "reason": problem}
    if verdict is None:
        return common
    return {**common, "hung": verdict.hung, "frame": verdict.frame[:500],
            "waits_on": verdict.waits_on[:100], "verdict": verdict.words[:500]}


def sample_process(cluster_id: int, cluster_name: str, agent: str, pid: int,
                   create_time: float | None) -> tuple[list[str], str]:
    """SAMPLES py-spy stacks of `pid` by the agent of node `agent`, GAP_S apart (a `stack`
    command each): the dumps that came, and what went wrong with the others. An overdue
    call's process and a Tune trial's step that overruns are looked at alike."""
    return sample_processes(cluster_name, [(agent, pid, create_time)])[0]


def sample_processes(cluster_name: str, targets: list[tuple[str, int, float | None]]
                     ) -> list[tuple[list[str], str]]:
    """sample_process for several processes (agent, pid, create time) at once: each round
    asks every agent, then waits for them all, so the ranks of one run are sampled side
    by side in about the time of one."""
    taken: list[tuple[list[str], str]] = [([], "") for _ in targets]
    for i in range(SAMPLES):
        if i:
            time.sleep(GAP_S)
        asked = [create_stack(agent, pid, create_time, timezone.now(), cluster_name)
                 for agent, pid, create_time in targets]
        for (dumps, _), (agent, _, _), command, at in zip(taken, targets, asked,
                                                          range(len(targets)), strict=True):
            answer = wait_for_answer(command)
            if isinstance(answer, str):
                taken[at] = (dumps, answer)
            elif answer.outcome == "taken":
                dumps.append(answer.result)
            else:
                taken[at] = (dumps, f"the agent of {agent} {answer.outcome or 'answered'}: "
                                    f"{answer.result}")
    return taken


def verdict_of(dumps: list[str], function: str, cluster_id: int, agent: str, pid: int,
               node_ip: str) -> Verdict | None:
    """The verdict of these dumps of `pid` with the CPU its agent last saw it use and the
    GPUs it (or a process it started) holds: `function` picks the thread that runs the
    work (a call's method; a Tune trial's function)."""
    cpu = NodeProcess.objects.filter(cluster_id=cluster_id, node=agent, pid=pid).values_list(
        "cpu_percent", flat=True).first()
    return hang_verdict(dumps, function, cpu, gpu_percent(node_ip, pid))


def gpu_percent(node_ip: str, pid: int) -> float | None:
    """The busiest GPU the process (or one it started) holds, as last read; None: it
    holds none."""
    held = [p for p in GpuProcess.objects.select_related("gpu").filter(
        gpu__node_ip=node_ip) if p.pid == pid or pid in (p.ancestors or ())]
    if not held:
        return None
    return max((p.gpu.utilization_gpu or 0.0) for p in held)


def failed(reason: str) -> dict[str, object]:
    return {"state": CallStack.FAILED, "reason": reason}


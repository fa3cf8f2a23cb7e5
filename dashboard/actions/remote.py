"""What the actions executor asks of a node's HTTP agent: signal one of its processes,
step by step in the action's audit, and tell when the process is gone."""

from __future__ import annotations

import signal
import time

from django.utils import timezone

from collectors.http import SourceError
from dashboard.actions.audit import step
from dashboard.actions.models import AuditEntry
from dashboard.agents.commands import create_signal
from dashboard.agents.models import AgentCommand
from dashboard.agents.remote import of_node

POLL_S = 0.1


class RemoteProcess:
    """A process on another node, signalled through that node's agent."""

    def __init__(self, entry: AuditEntry, node: str, pid: int, create_time: float | None
                 ) -> None:
        """`create_time`: the start time the operator confirmed, as the agent reported it;
        the agent signals only a process that started then."""
        if create_time is None:
            raise SourceError(f"the agent of {node} did not report process {pid} when the "
                              "action was confirmed (it watches Ray workers and GPU "
                              "processes): it had ended or is not one")
        self.entry, self.node, self.pid, self.create_time = entry, node, pid, create_time
        self.ended = False

    def send(self, sig: int) -> str:
        """Ask the agent; wait for its answer (while the command lives). What it said."""
        name = signal.Signals(sig).name
        command = create_signal(self.entry, self.node, self.pid, name, self.create_time,
                                timezone.now(), str(self.entry.target.get("cluster") or ""))
        step(self.entry, "agent_command", command.created_at,
             f"command #{command.pk} for the agent of {self.node}: {name} to pid {self.pid}, "
             f"expires {command.expires_at:%H:%M:%S}")
        done = self._answer(command)
        who = done.fetched_by.prefix if done.fetched_by else "?"
        step(self.entry, "agent_result", done.done_at or timezone.now(),
             f"agent of {self.node} (token {who}…): {done.outcome}: {done.result}")
        if done.outcome == "refused":
            raise SourceError(f"the agent of {self.node} refused: {done.result}")
        self.ended = self.ended or done.outcome == "gone"
        return f"{done.result} by the agent of {self.node}"

    def _answer(self, command: AgentCommand) -> AgentCommand:
        while True:
            command.refresh_from_db()
            if command.done_at is not None:
                return command
            now = timezone.now()
            if command.fetched_at is None and now >= command.expires_at:
                raise SourceError(f"the agent of {self.node} did not fetch command "
                                  f"#{command.pk} before it expired: is it running?")
            if command.fetched_at is not None and now >= command.expires_at:
                raise SourceError(f"the agent of {self.node} took command #{command.pk} "
                                  "but did not say what it did")
            time.sleep(POLL_S)

    def gone(self) -> bool:
        """The agent said so, or its latest snapshot no longer lists the process alive."""
        if self.ended:
            return True
        alive = of_node(self.node, str(self.entry.target.get("cluster") or "")).filter(
            pid=self.pid, create_time=self.create_time).exclude(state="Z")
        return not alive.exists()

"""Commands for node agents: created bound to an action, handed out once to an agent of
their node before they expire (signed with that agent's command key), answered once. A
node whose agents' tokens have no command key (issued before command keys) is sent
none: its command is refused at once, saying to rotate the token. The action is its
audit entry, a row of the actions app (AgentCommand.audit_entry): that app sits above
this one and hands the entry in; this module does not import it."""

from __future__ import annotations

import hashlib
import secrets
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Case, Model, When
from django.utils import timezone

from collectors.agent import wire
from dashboard.agents import sealing
from dashboard.agents.models import AgentCommand, NodeToken
from dashboard.agents.tokens import live_tokens
from dashboard.cluster.models import Cluster, settings_cluster_pk
from dashboard.core.errors import ApiError
from dashboard.core.push import publish

OUTCOMES = ("signalled", "gone", "refused", "taken", "failed")
HAND_OUT_AT_MOST = 20


def wake_group(node: str) -> str:
    """The Channels group an agent's long-poll waits on (names allow few characters)."""
    return f"agent-{hashlib.sha256(node.encode()).hexdigest()[:24]}"


def create_signal(entry: Model | None, node: str, pid: int, signal_name: str,
                  create_time: float, now: datetime, cluster: str = "") -> AgentCommand:
    if signal_name not in wire.SIGNALS:
        raise ValueError(f"an agent sends {', '.join(wire.SIGNALS)} only")
    return _create(node, cluster, AgentCommand.SIGNAL, entry, now,
                   {"pid": pid, "signal": signal_name, "create_time": create_time})


def create_stack(node: str, pid: int, create_time: float, now: datetime,
                 cluster: str = "") -> AgentCommand:
    """Ask the node's agent for a py-spy dump of `pid` (the process that started then)."""
    return _create(node, cluster, AgentCommand.STACK, None, now,
                   {"pid": pid, "create_time": create_time})


def _create(node: str, cluster: str, kind: str, entry: Model | None, now: datetime,
            payload: dict[str, Any]) -> AgentCommand:
    """A command for the agents of `node` in `cluster` (a name; "": the one RAY_ADDRESS
    points at) only: a node of the same name in another cluster never gets it."""
    cluster_pk = Cluster.objects.filter(name=cluster).values_list("pk", flat=True).first() \
        if cluster else None
    cluster_pk = cluster_pk or settings_cluster_pk()
    unsigned = cannot_sign(node, now, cluster_pk)
    answered = {"done_at": now, "outcome": "refused", "result": unsigned} if unsigned else {}
    command = AgentCommand.objects.create(
        node=node, cluster_id=cluster_pk, kind=kind, audit_entry=entry,
        nonce=secrets.token_hex(16), payload=payload,
        created_at=now, expires_at=now + timedelta(seconds=settings.AGENT_COMMAND_TTL_S),
        **answered)
    if not unsigned:
        publish(wake_group(node), "command", {"id": command.pk})  # after commit
    return command


def command_key(token: NodeToken) -> str | None:
    """The key that signs `token`'s commands; None when raywatch has none for it."""
    return sealing.unseal(token.command_key_sealed)


def cannot_sign(node: str, now: datetime, cluster_pk: int) -> str | None:
    """Why no command can go to `node`'s agent: its live tokens (heard from lately) have
    no command key raywatch can use. None when one has, or none is live (the command
    then waits for an agent as any other)."""
    live = list(live_tokens(now).filter(node=node, cluster_id=cluster_pk))
    if not live or any(command_key(t) for t in live):
        return None
    return (f"the agent token {live[0].prefix}… of node {node} has no command key raywatch "
            "can use (issued before command keys, or RAYWATCH_AGENT_COMMAND_SECRET changed): "
            "raywatch signs it no command. Rotate this token (Agents page, or manage.py "
            f"agent_token {node} --rotate) and give its agent the new one")


def hand_out(token: NodeToken, now: datetime) -> list[dict[str, Any]]:
    """The node's commands not yet handed out and not expired, claimed for this agent;
    none for a token raywatch cannot sign for (another of the node's tokens may)."""
    key = command_key(token)
    if key is None:
        return []
    # An operator's signal before any stack, however many stacks wait: a burst of them
    # (many calls overdue at once) never makes a terminate expire unsent.
    waiting = AgentCommand.objects.filter(
        node=token.node, cluster_id=token.cluster_id, fetched_at=None, done_at=None,
        expires_at__gt=now,  # done: refused unsent
    ).order_by(Case(When(kind=AgentCommand.SIGNAL, then=0), default=1), "created_at", "id")
    claimed = []
    for command in waiting[:HAND_OUT_AT_MOST]:
        # A conditional update: two agents of one node (or two polls) never get one twice.
        if AgentCommand.objects.filter(pk=command.pk, fetched_at=None).update(
                fetched_at=now, fetched_by=token):
            claimed.append(signed(command, key))
    return claimed


def signed(command: AgentCommand, key: str) -> dict[str, Any]:
    body = {"id": command.pk, "kind": command.kind, "node": command.node,
            "action_id": command.audit_entry_id, "nonce": command.nonce,
            "issued_at": wire.timestamp(command.created_at),
            "expires_at": wire.timestamp(command.expires_at), "payload": command.payload}
    return {**body, "signature": wire.sign_command(key, body)}


def take_result(token: NodeToken, pk: int, body: Any, now: datetime) -> AgentCommand:
    if not isinstance(body, dict) or body.get("version") != wire.VERSION:
        raise ApiError(f"a result is a JSON object with version {wire.VERSION}")
    outcome, detail = body.get("outcome"), body.get("detail")
    if outcome not in OUTCOMES or not isinstance(detail, str):
        raise ApiError(f"outcome: one of {', '.join(OUTCOMES)}; detail: text")
    with transaction.atomic():
        command = AgentCommand.objects.filter(pk=pk, node=token.node,
                                              cluster_id=token.cluster_id).first()
        if command is None:  # another node's looks the same as none: nothing to learn
            raise ApiError(f"no command {pk} for node {token.node}", 404)
        if body.get("nonce") != command.nonce:
            raise ApiError("the nonce does not match the command's", 400)
        if command.fetched_at is None:
            raise ApiError(f"command {pk} was not handed out", 409)
        longest = (wire.MAX_STACK_CHARS if command.kind == AgentCommand.STACK
                   else wire.MAX_DETAIL_CHARS)
        if not AgentCommand.objects.filter(pk=pk, done_at=None).update(
                done_at=now, outcome=outcome, result=detail[:longest]):
            raise ApiError(f"command {pk} already has its result", 409)
    command.refresh_from_db()
    return command


POLL_S = 0.2
ANSWER_GRACE_S = 10.0  # after py-spy's own timeout, for the answer to come back


def wait_for_answer(command: AgentCommand) -> AgentCommand | str:
    """The command once answered, or why no answer came (in a worker, never a poll)."""
    answer_by = command.expires_at
    while True:
        command.refresh_from_db()
        if command.done_at is not None:
            return command
        if command.fetched_at is not None:
            answer_by = max(command.expires_at, command.fetched_at + timedelta(
                seconds=settings.STACK_TIMEOUT_S + ANSWER_GRACE_S))
        if timezone.now() >= answer_by:
            break
        time.sleep(POLL_S)
    if command.fetched_at is None:
        return (f"the agent of {command.node} did not fetch command #{command.pk} before it "
                "expired: is it running?")
    return f"the agent of {command.node} took command #{command.pk} but did not answer"

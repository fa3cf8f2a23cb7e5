"""`manage.py agent_token NODE`: issue a node token for NODE's agent and print it once.
`--revoke` revokes NODE's live tokens (or only the one `--prefix` names, as the Agents
page shows it); `--list` lists every token."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from dashboard.agents import tokens
from dashboard.agents.models import NodeToken
from dashboard.core.errors import ApiError


class Command(BaseCommand):
    help = "Issue (printed once), revoke or list the node tokens of node agents."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("node", nargs="?", help="the node's name (its agent's identity)")
        parser.add_argument("--ip", default="", help="the node's address (else the agent's "
                                                     "first report pins it)")
        parser.add_argument("--cluster", default="", help="the cluster NODE is in (default: "
                                                         "the one RAY_ADDRESS points at)")
        parser.add_argument("--revoke", action="store_true", help="revoke NODE's live tokens")
        parser.add_argument("--prefix", default="", help="with --revoke: only this token")
        parser.add_argument("--list", action="store_true", help="list every token")

    def handle(self, *args: Any, node: str | None, ip: str, revoke: bool, prefix: str,
               cluster: str, **options: Any) -> None:
        if options["list"]:
            for row in NodeToken.objects.all():
                self.stdout.write(f"{row.prefix}…  {row.node}  {row.node_ip or '-'}  "
                                  f"{row.cluster.name}  {_state(row)}")
            return
        if not node:
            raise CommandError("give the NODE to issue a token for (or --list)")
        if revoke:
            self._revoke(node, prefix)
            return
        try:
            row, token = tokens.issue(node, None, timezone.now(), ip, cluster)
        except ApiError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(token)
        self.stderr.write(f"the token of node {row.node}, shown this once (raywatch keeps its "
                          "hash). On that node: RAYWATCH_URL=… RAYWATCH_AGENT_TOKEN=… make agent")

    def _revoke(self, node: str, prefix: str) -> None:
        rows = NodeToken.objects.filter(node=node, revoked_at=None)
        if prefix:
            rows = rows.filter(prefix__startswith=prefix[:12])
        revoked = [row for row in rows if tokens.revoke(row, None, timezone.now())]
        if not revoked:
            raise CommandError(f"node {node!r} has no live token{' ' + prefix if prefix else ''}")
        for row in revoked:
            self.stdout.write(f"revoked {row.prefix}… of node {row.node}")


def _state(row: NodeToken) -> str:
    if row.revoked_at:
        return f"revoked {row.revoked_at:%Y-%m-%d %H:%M}"
    if row.last_seen_at:
        return f"last seen {row.last_seen_at:%Y-%m-%d %H:%M:%S}"
    return "never seen"

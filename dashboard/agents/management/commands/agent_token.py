"""`manage.py agent_token NODE`: issue a node token for NODE's agent and print it once.
`--rotate` issues NODE's next token in place of its live one (or the one `--prefix`
names), which keeps working `--overlap` seconds, then stops. `--revoke` revokes NODE's
live tokens (or only the one `--prefix` names, as the Agents page shows it); `--list`
lists every token."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from dashboard.agents import sealing, tokens
from dashboard.agents.models import NodeToken
from dashboard.core.errors import ApiError


class Command(BaseCommand):
    help = "Issue or rotate (the new token printed once), revoke or list node agents' tokens."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("node", nargs="?", help="the node's name (its agent's identity)")
        parser.add_argument("--ip", default="", help="the node's address (else the agent's "
                                                     "first report pins it)")
        parser.add_argument("--cluster", default="", help="the cluster NODE is in (default: "
                                                         "the one RAY_ADDRESS points at)")
        parser.add_argument("--revoke", action="store_true", help="revoke NODE's live tokens")
        parser.add_argument("--rotate", action="store_true",
                            help="issue NODE's next token; its live one keeps working "
                                 "--overlap seconds, then stops")
        parser.add_argument("--overlap", type=float, default=None,
                            help="with --rotate: seconds the old token keeps working "
                                 "(default RAYWATCH_AGENT_TOKEN_OVERLAP_S)")
        parser.add_argument("--expires-days", type=float, default=None,
                            help="the new token stops working after this many days (0: "
                                 "never; default RAYWATCH_AGENT_TOKEN_EXPIRES_DAYS)")
        parser.add_argument("--prefix", default="",
                            help="with --revoke or --rotate: only this token")
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
            if options["rotate"]:
                row, token = self._rotate(node, prefix, options["overlap"],
                                          options["expires_days"])
            else:
                row, token = tokens.issue(node, None, timezone.now(), ip, cluster,
                                          options["expires_days"])
        except ApiError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(token)
        ends = f"; it stops working at {row.expires_at:%Y-%m-%d %H:%M} UTC" \
            if row.expires_at else ""
        self.stderr.write(f"the token of node {row.node}, shown this once (raywatch keeps its "
                          f"hash){ends}. On that node: RAYWATCH_URL=… RAYWATCH_AGENT_TOKEN=… "
                          "make agent")

    def _rotate(self, node: str, prefix: str, overlap: float | None,
                expires_days: float | None) -> tuple[NodeToken, str]:
        now = timezone.now()
        rows = tokens.usable(now).filter(node=node, replaced_by=None)
        if prefix:
            rows = rows.filter(prefix__startswith=prefix[:12])
        found = list(rows[:2])
        if len(found) != 1:
            raise CommandError(f"node {node!r} has {'no' if not found else 'more than one'} "
                               f"live token{' ' + prefix if prefix else ''} to rotate"
                               f"{'' if not found else ': name one with --prefix'}")
        old = found[0]
        row, token = tokens.rotate(old, None, now, overlap, expires_days)
        self.stderr.write(f"rotated: {old.prefix}… of node {node} keeps working until "
                          f"{old.expires_at:%Y-%m-%d %H:%M:%S} UTC, then stops; "
                          f"{row.prefix}… replaces it")
        return row, token

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
    ends = ""
    if row.expires_at is not None:
        ended = row.expires_at <= timezone.now()
        ends = f"  {'expired' if ended else 'expires'} {row.expires_at:%Y-%m-%d %H:%M:%S}" + (
            " (rotated)" if row.replaced_by_id else "")
    keyless = "" if sealing.unseal(row.command_key_sealed) else "  no command key: rotate it"
    seen = (f"last seen {row.last_seen_at:%Y-%m-%d %H:%M:%S}" if row.last_seen_at
            else "never seen")
    return seen + ends + keyless

"""`manage.py cluster add NAME URL [--token-file F] [--gcs HOST:PORT]`: watch another Ray
cluster; `manage.py cluster list`: every cluster and its state; `manage.py cluster approve
NAME [--url URL] [--token-file F] [--gcs HOST:PORT]` / `refuse NAME`: a cluster its head's
agent announced, or what that agent claims (approve without --gcs keeps the one it has)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from dashboard.cluster.models import Cluster
from dashboard.cluster.registry import add_cluster, decide
from dashboard.cluster.views_data import overview
from dashboard.core.errors import ApiError


class Command(BaseCommand):
    help = "Add a Ray cluster for raywatch to watch, or list the clusters it watches."

    def add_arguments(self, parser: Any) -> None:
        sub = parser.add_subparsers(dest="what", required=True)
        add = sub.add_parser("add", help="watch another cluster")
        add.add_argument("name", help="its name in raywatch (pages, alerts, /metrics)")
        add.add_argument("url", help="its dashboard's URL, http://HEAD:8265")
        add.add_argument("--token-file", default="",
                         help="a file holding Ray's auth token for it (else "
                              "RAY_CLUSTER_TOKEN from the environment, else none)")
        add.add_argument("--gcs", default="", help="its GCS, HOST:PORT: lets raywatch kill a "
                                                   "hung trial's actor on a node with no agent")
        sub.add_parser("list", help="every cluster and its state")
        approve = sub.add_parser("approve", help="poll a cluster its head's agent announced")
        approve.add_argument("name")
        approve.add_argument("--url", default="", help="its dashboard's URL, if not the one "
                                                       "announced")
        approve.add_argument("--token-file", default="", help="Ray's auth token for it")
        approve.add_argument("--gcs", default="", help="its GCS, HOST:PORT, if not the one "
                                                       "it has (as its head's agent claims)")
        refuse = sub.add_parser("refuse", help="never poll a cluster its head announced")
        refuse.add_argument("name")
        keep = sub.add_parser("keep", help="days to keep a cluster once it ended (0: for "
                                           "ever; 'default': RAYWATCH_ENDED_CLUSTER_KEEP_D)")
        keep.add_argument("name")
        keep.add_argument("days")

    def handle(self, *args: Any, what: str, **options: Any) -> None:
        if what == "list":
            for row in overview():
                self.stdout.write(f"{row['name']}  {row['state']}  {row['origin']}/"
                                  f"{row['approval']}  {row['dashboard_url'] or '-'}  "
                                  f"nodes {row['nodes_alive']}  "
                                  f"open incidents {row['open_incidents']}")
                if row["claim"]:
                    claimed = ", ".join(f"{k} {v}" for k, v in row["claim"].items()
                                        if k in ("gcs_address", "dashboard_url"))
                    self.stdout.write(f"  claimed by the agent {row['claim']['by']}…: "
                                      f"{claimed} (approve with --gcs/--url to take it, "
                                      "without to keep what it has)")
            return
        if what == "keep":
            self._keep(options["name"], options["days"])
            return
        if what in ("approve", "refuse"):
            token = _read(options["token_file"]) if options.get("token_file") else None
            try:
                cluster = decide(options["name"], what == "approve", timezone.now(),
                                 address=options.get("url", ""), token=token,
                                 gcs_address=options.get("gcs", ""))
            except ApiError as exc:
                raise CommandError(exc.message) from None
            self.stdout.write(f"cluster {cluster.name} {what}d")
            return
        token = os.environ.get("RAY_CLUSTER_TOKEN", "")
        if options["token_file"]:
            token = _read(options["token_file"])
        try:
            cluster = add_cluster(options["name"], options["url"], token, timezone.now(),
                                  gcs_address=options["gcs"])
        except ApiError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"cluster {cluster.name} added: polled from the next Ray poll on")

    def _keep(self, name: str, days: str) -> None:
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            raise CommandError(f"no cluster named {name!r}")
        if days != "default" and not days.isdigit():
            raise CommandError(f"days: a whole number of days, 0 for ever, or 'default' "
                               f"(not {days!r})")
        cluster.keep_days = None if days == "default" else int(days)
        cluster.save(update_fields=["keep_days"])
        said = ("as RAYWATCH_ENDED_CLUSTER_KEEP_D says" if cluster.keep_days is None
                else "for ever" if cluster.keep_days == 0 else f"{cluster.keep_days} days")
        self.stdout.write(f"cluster {name} is kept {said} once it has ended")


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None

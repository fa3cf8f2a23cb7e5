"""`manage.py cluster add NAME URL [--token-file F]`: watch another Ray cluster;
`manage.py cluster list`: every cluster and its state."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from dashboard.cluster.registry import add_cluster
from dashboard.cluster.state import overview
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

    def handle(self, *args: Any, what: str, **options: Any) -> None:
        if what == "list":
            for row in overview():
                self.stdout.write(f"{row['name']}  {row['state']}  {row['origin']}/"
                                  f"{row['approval']}  {row['dashboard_url'] or '-'}  "
                                  f"nodes {row['nodes_alive']}  "
                                  f"open incidents {row['open_incidents']}")
            return
        token = os.environ.get("RAY_CLUSTER_TOKEN", "")
        if options["token_file"]:
            try:
                token = Path(options["token_file"]).read_text().strip()
            except OSError as exc:
                raise CommandError(f"cannot read {options['token_file']}: {exc.strerror}") \
                    from None
        try:
            cluster = add_cluster(options["name"], options["url"], token, timezone.now(),
                                  gcs_address=options["gcs"])
        except ApiError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"cluster {cluster.name} added: polled from the next Ray poll on")

"""The migration steps that give an existing table its `cluster` column.

The column's default (models.settings_cluster_pk) reads the Cluster table through the
live model, whose columns a database being migrated may not have yet: so no migration
ever evaluates it. The column is added nullable, filled with the RAY_ADDRESS cluster
through the historical models, made NOT NULL, and only then given its default (a
Python-side default: no SQL, nothing evaluated)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import migrations, models
from django.utils import timezone

from dashboard.cluster.models import settings_cluster_pk


def cluster_column(app_label: str, model_name: str) -> list[Any]:
    def field(**extra: Any) -> models.ForeignKey:
        return models.ForeignKey(on_delete=models.deletion.CASCADE, related_name="+",
                                 to="cluster.cluster", **extra)

    def fill(apps: Any, schema_editor: Any) -> None:
        rows = apps.get_model(app_label, model_name).objects.filter(cluster__isnull=True)
        if not rows.exists():
            return
        now = timezone.now()
        cluster, _ = apps.get_model("cluster", "Cluster").objects.get_or_create(
            name=settings.CLUSTER_NAME, defaults={"first_seen_at": now, "state_since": now})
        postgres = schema_editor.connection.vendor == "postgresql"
        if postgres:  # checked now: pending FK checks would refuse the ALTER that follows
            schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        rows.update(cluster=cluster)
        if postgres:
            schema_editor.execute("SET CONSTRAINTS ALL DEFERRED")

    return [
        migrations.AddField(model_name=model_name, name="cluster", field=field(null=True)),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(model_name=model_name, name="cluster", field=field()),
        migrations.AlterField(model_name=model_name, name="cluster",
                              field=field(default=settings_cluster_pk)),
    ]

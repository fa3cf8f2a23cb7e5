from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="Node",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("node_id", models.CharField(max_length=64, unique=True)),
                ("node_ip", models.CharField(max_length=64)),
                ("hostname", models.CharField(blank=True, default="", max_length=255)),
                ("is_head", models.BooleanField(default=False)),
                ("state", models.CharField(max_length=16)),
                ("state_message", models.TextField(blank=True, default="")),
                ("started_at", models.DateTimeField(null=True)),
                ("ended_at", models.DateTimeField(null=True)),
                ("resources", models.JSONField(default=dict)),
                ("labels", models.JSONField(default=dict)),
                ("cpu_percent", models.FloatField(null=True)),
                ("mem_total_bytes", models.BigIntegerField(null=True)),
                ("mem_used_bytes", models.BigIntegerField(null=True)),
                ("object_store_total_bytes", models.BigIntegerField(null=True)),
                ("object_store_used_bytes", models.BigIntegerField(null=True)),
                ("first_seen_at", models.DateTimeField(auto_now_add=True)),
                ("last_seen_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={"ordering": ["-is_head", "state", "node_ip", "node_id"]},
        ),
    ]

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="GpuSample",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("node_id", models.CharField(max_length=64)),
                ("gpu_index", models.PositiveSmallIntegerField()),
                ("gpu_uuid", models.CharField(max_length=64)),
                ("at", models.DateTimeField()),
                ("utilization_gpu", models.FloatField(null=True)),
                ("utilization_memory", models.FloatField(null=True)),
                ("memory_used_bytes", models.BigIntegerField(null=True)),
                ("memory_total_bytes", models.BigIntegerField(null=True)),
                ("temperature_c", models.FloatField(null=True)),
                ("power_w", models.FloatField(null=True)),
                ("power_limit_w", models.FloatField(null=True)),
                ("sm_clock_mhz", models.IntegerField(null=True)),
                ("simulated", models.BooleanField(default=False)),
            ],
            options={"indexes": [models.Index(fields=["gpu_uuid", "at"], name="gpusample_uuid_at")]},
        ),
    ]

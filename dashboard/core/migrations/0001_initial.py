from django.db import migrations, models


def create_roles(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    for name in ("viewer", "operator", "admin"):
        Group.objects.get_or_create(name=name)


class Migration(migrations.Migration):
    initial = True
    dependencies = [("auth", "0012_alter_user_first_name_max_length")]

    operations = [
        migrations.CreateModel(
            name="SourceHealth",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("source", models.CharField(max_length=32)),
                ("scope", models.CharField(blank=True, default="", max_length=200)),
                ("state", models.CharField(default="down", max_length=16)),
                ("last_success_at", models.DateTimeField(null=True)),
                ("last_attempt_at", models.DateTimeField(null=True)),
                ("last_error", models.TextField(blank=True, default="")),
                ("last_duration_ms", models.FloatField(null=True)),
                ("consecutive_failures", models.PositiveIntegerField(default=0)),
                ("interval_s", models.FloatField(default=2.0)),
            ],
            options={"ordering": ["source", "scope"]},
        ),
        migrations.AddConstraint(
            model_name="sourcehealth",
            constraint=models.UniqueConstraint(fields=("source", "scope"), name="one_health_row_per_source"),
        ),
        migrations.RunPython(create_roles, migrations.RunPython.noop),
    ]

"""The Celery GPU agent is gone: every node's GPUs come from its node agent over HTTP.
Its queue column goes, and the row keeps what it is: a node whose GPUs are reported."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("gpus", "0004_agent_cluster")]

    operations = [
        migrations.RemoveField(model_name="agent", name="queue"),
        migrations.RenameModel(old_name="Agent", new_name="GpuNode"),
    ]

# Tokens issued before this keep command_key_sealed empty: their command key cannot be
# derived from the hash stored (that is the point). They keep reporting; raywatch sends
# their agents no commands until they are rotated (docs/agent-protocol.md).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0003_stream_data_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='nodetoken',
            name='command_key_sealed',
            field=models.TextField(blank=True, default=''),
        ),
    ]

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0005_nodetoken_expiry_rotation'),
    ]

    operations = [
        migrations.AddField(
            model_name='nodetoken',
            name='agent_problems',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='nodetoken',
            name='clock_skew_s',
            field=models.IntegerField(blank=True, null=True),
        ),
    ]

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('trials', '0004_trial_metric_range'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='trial',
            name='best_value',
        ),
    ]

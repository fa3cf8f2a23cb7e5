"""Trial.metric_range (each metric's lowest and highest), filled from the results already
stored; it replaces best_value (the best of one guessed metric), removed in 0005 (its own
transaction: Postgres refuses to alter a table with pending trigger events)."""

from django.db import migrations, models

CHUNK = 2000


def fill_ranges(apps, schema_editor):  # type: ignore[no-untyped-def]
    Trial = apps.get_model("trials", "Trial")
    StepResult = apps.get_model("trials", "StepResult")
    ranges: dict[int, dict[str, list[float]]] = {}
    rows = StepResult.objects.order_by("trial_id").values_list("trial_id", "metrics")
    for trial_id, metrics in rows.iterator(chunk_size=CHUNK):
        if trial_id not in ranges and len(ranges) >= CHUNK:
            _save(Trial, ranges)
        spans = ranges.setdefault(trial_id, {})
        for name, value in (metrics or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                low, high = spans.get(name, (value, value))
                spans[name] = [min(low, value), max(high, value)]
    _save(Trial, ranges)


def _save(Trial, ranges):  # type: ignore[no-untyped-def]
    trials = list(Trial.objects.filter(pk__in=list(ranges)).only("pk"))
    for trial in trials:
        trial.metric_range = ranges[trial.pk]
    Trial.objects.bulk_update(trials, ["metric_range"], batch_size=500)
    ranges.clear()


class Migration(migrations.Migration):

    dependencies = [
        ('trials', '0003_trial_stack'),
    ]

    operations = [
        migrations.AddField(
            model_name='trial',
            name='metric_range',
            field=models.JSONField(default=dict),
        ),
        migrations.RunPython(fill_ranges, migrations.RunPython.noop),
    ]

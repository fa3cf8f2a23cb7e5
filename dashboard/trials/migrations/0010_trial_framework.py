"""Trial.framework: what wrote a trial's files (tune, verl, easyr1, openrlhf, tensorboard),
set by the readers from now on. The trials stored before are named from what is known of
them: a Tune experiment's trials are Tune's; a TensorBoard run is OpenRLHF's when its
metrics hold OpenRLHF's timing tags (train/timing/*), else plain TensorBoard's. (No JSONL
run was read before this.)"""

from django.db import migrations, models

CHUNK = 2000


def name_frameworks(apps, schema_editor):  # type: ignore[no-untyped-def]
    Trial = apps.get_model("trials", "Trial")
    Trial.objects.filter(experiment__kind="tune").update(framework="tune")
    runs = Trial.objects.filter(experiment__kind="tensorboard").values_list("pk", "metric_range")
    openrlhf: list[int] = []
    for pk, ranges in runs.iterator(chunk_size=CHUNK):
        if any(name.startswith("train/timing/") for name in ranges or {}):
            openrlhf.append(pk)
    Trial.objects.filter(experiment__kind="tensorboard").update(framework="tensorboard")
    for start in range(0, len(openrlhf), CHUNK):
        Trial.objects.filter(pk__in=openrlhf[start:start + CHUNK]).update(framework="openrlhf")


class Migration(migrations.Migration):

    dependencies = [
        ('trials', '0009_trial_terminated_by'),
    ]

    operations = [
        migrations.AddField(
            model_name='trial',
            name='framework',
            field=models.CharField(blank=True, default='', max_length=16),
        ),
        migrations.RunPython(name_frameworks, migrations.RunPython.noop),
    ]

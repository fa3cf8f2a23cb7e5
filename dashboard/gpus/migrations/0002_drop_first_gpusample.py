from django.db import migrations


class Migration(migrations.Migration):
    """The first GpuSample repeated each GPU's identity on every row; samples now
    point at a Gpu row. No release stored samples, so the table is recreated."""

    dependencies = [("gpus", "0001_initial")]

    operations = [migrations.DeleteModel(name="GpuSample")]

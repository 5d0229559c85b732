from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0008_objects_bounded"),
    ]

    operations = [
        migrations.AddField(
            model_name="kubecluster",
            name="nks_api_address",
            field=models.CharField(blank=True, max_length=300),
        ),
    ]

import django.db.models
from django.db import migrations

import dashboard.encryption
from dashboard.migration_helpers import decrypt_columns, encrypt_plaintext_columns


class Migration(migrations.Migration):
    dependencies = [
        ("leases", "0002_renewals_stay_hot"),
    ]

    operations = [
        migrations.AddField(
            model_name="kubecluster",
            name="config_warning",
            field=django.db.models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name="kubecluster",
            name="skipped_objects_total",
            field=django.db.models.BigIntegerField(
                default=0,
                help_text="Objects from the API server skipped or cleaned because they could "
                "not be stored as sent (a NUL character, say).",
            ),
        ),
        # Encrypt while the column is still plain text, then switch the field type (the
        # database column stays text).
        migrations.RunPython(
            encrypt_plaintext_columns("leases", "KubeCluster", "kubeconfig"),
            decrypt_columns("leases", "KubeCluster", "kubeconfig"),
        ),
        migrations.AlterField(
            model_name="kubecluster",
            name="kubeconfig",
            field=dashboard.encryption.EncryptedTextField(blank=True),
        ),
    ]

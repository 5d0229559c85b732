from django.db import migrations

import dashboard.encryption
from dashboard.migration_helpers import decrypt_columns, encrypt_plaintext_columns


class Migration(migrations.Migration):
    dependencies = [
        ("nks", "0001_initial"),
    ]

    operations = [
        # Encrypt while the columns are still plain text, then switch the field type (the
        # database columns stay text).
        migrations.RunPython(
            encrypt_plaintext_columns("nks", "NksAccount", "password", "token"),
            decrypt_columns("nks", "NksAccount", "password", "token"),
        ),
        migrations.AlterField(
            model_name="nksaccount",
            name="password",
            field=dashboard.encryption.EncryptedTextField(blank=True),
        ),
        migrations.AlterField(
            model_name="nksaccount",
            name="token",
            field=dashboard.encryption.EncryptedTextField(blank=True),
        ),
    ]

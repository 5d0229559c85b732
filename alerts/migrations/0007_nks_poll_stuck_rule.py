from django.db import migrations, models

# The rule's admin row is made after migrate by alerts.rules.ensure_rule_rows, as every
# rule's is; this only adds the new value to the rule columns' choices.
RULES = [
    ("lease_expired", "lease expired"),
    ("lease_flapping", "lease flapping"),
    ("node_heartbeats_expired", "node heartbeats expired"),
    ("cluster_unhealthy", "NKS cluster unhealthy"),
    ("nodegroup_not_ready", "NKS nodegroup not ready"),
    ("nodegroup_mismatch", "NKS and the cluster disagree"),
    ("resize_failed", "nodegroup resize failed"),
    ("source_stale", "data source stale"),
    ("nks_poll_stuck", "NKS poll stuck"),
    ("leader_group_unstaffed", "leader group unstaffed"),
    ("leader_group_degraded", "leader group degraded"),
    ("fencing_token_reused", "fencing token reused"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0006_subscription_confirmation"),
    ]

    operations = [
        migrations.AlterField(
            model_name="alertrule",
            name="rule",
            field=models.CharField(choices=RULES, max_length=40, unique=True),
        ),
        migrations.AlterField(
            model_name="incident",
            name="rule",
            field=models.CharField(choices=RULES, max_length=40),
        ),
    ]

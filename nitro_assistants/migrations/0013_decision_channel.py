from django.db import migrations, models


def channels_known_from_the_reviewer(apps, schema_editor):
    """Decisions recorded before the channel was: a policy rule's and a deadline's name
    themselves in ``reviewer_id`` (``policy:<rule>``, ``deadline:<rule>``); a person's stay
    empty (the admin and the API were not told apart)."""
    Decision = apps.get_model("nitro_assistants", "Decision")
    db = schema_editor.connection.alias
    for channel in ("policy", "deadline"):
        Decision.objects.using(db).filter(reviewer_id__startswith=f"{channel}:").update(
            channel=channel
        )


class Migration(migrations.Migration):
    dependencies = [
        ("nitro_assistants", "0012_thread_metadata"),
    ]

    operations = [
        migrations.AddField(
            model_name="decision",
            name="channel",
            field=models.CharField(
                blank=True,
                choices=[
                    ("admin", "admin"),
                    ("api", "API"),
                    ("slack", "Slack"),
                    ("email", "e-mail reply"),
                    ("policy", "policy rule"),
                    ("grant", "grant"),
                    ("deadline", "deadline"),
                ],
                help_text="where it was decided; empty for code of the host project",
                max_length=16,
            ),
        ),
        migrations.RunPython(channels_known_from_the_reviewer, migrations.RunPython.noop),
    ]

"""Every review carries the digest of what a reviewer is shown (decisions name it): fill it for
tool-call and reply reviews recorded before."""

from django.db import migrations


def fill_digests(apps, schema_editor):
    from nitro_assistants import rules

    Review = apps.get_model("nitro_assistants", "Review")
    for review in Review.objects.filter(digest="").iterator():
        review.digest = rules.review_digest(review.kind, review.payload or {})
        review.save(update_fields=["digest"])


class Migration(migrations.Migration):
    dependencies = [("nitro_assistants", "0004_interactions_api")]

    operations = [migrations.RunPython(fill_digests, migrations.RunPython.noop)]

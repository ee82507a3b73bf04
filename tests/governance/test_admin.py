"""Policy rules in the admin (field errors, permission, dry run) and the queue and review screen
showing approvals and deadlines."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from nitro_assistants.models import Approval, Policy, Review, ReviewHandling
from tests.governance.conftest import approve, mirrored, reviewer

pytestmark = pytest.mark.django_db

ADD = "/admin/nitro_assistants/policy/add/"


def rule_form(**fields: Any) -> dict[str, Any]:
    return {
        "name": "large refunds",
        "position": "10",
        "enabled": "on",
        "mode": "enforce",
        "assistant": "",
        "kind": "",
        "tool": "refund_*",
        "conditions": '[{"path": "amount", "op": "gt", "value": 100}]',
        "action": "review",
        "reason": "",
        "approvals": "2",
        "group": "",
        "priority": "0",
        "deadline": "",
        "on_deadline": "",
        "escalate_to": "",
        "escalation_deadline": "",
        "on_escalation_deadline": "",
        **fields,
    }


def test_a_rule_is_saved_and_each_change_is_a_new_version(editor: Client) -> None:
    response = editor.post(ADD, rule_form())
    assert response.status_code == 302, response.content.decode()[:2000]
    rule = Policy.objects.get()
    assert rule.conditions == [{"path": "amount", "op": "gt", "value": 100}]
    assert rule.version == 1
    response = editor.post(
        f"/admin/nitro_assistants/policy/{rule.pk}/change/", rule_form(approvals="3")
    )
    assert response.status_code == 302
    rule.refresh_from_db()
    assert (rule.approvals, rule.version) == (3, 2)


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"conditions": '[{"path": "a..b", "op": "gt", "value": 1}]'},
            "conditions",
            "not a valid path",
        ),
        (
            {"conditions": '[{"path": "amount", "op": "over", "value": 1}]'},
            "conditions",
            "unknown operator",
        ),
        (
            {"conditions": '[{"path": "amount", "op": "in", "value": 5}]'},
            "conditions",
            "takes a list",
        ),
        (
            {"conditions": '[{"path": "memo", "op": "matches", "value": "(["}]'},
            "conditions",
            "not a regular expression",
        ),
        ({"conditions": "{not json"}, "conditions", "Enter a valid JSON"),
        ({"on_deadline": "escalate", "deadline": "04:00:00"}, "escalate_to", "Name the group"),
        ({"action": "auto_reject"}, "reason", "Say why"),
        ({"approvals": "0"}, "approvals", "from 1 to"),
    ],
)
def test_a_bad_rule_is_refused_on_its_field(
    editor: Client, fields: dict[str, Any], field: str, message: str
) -> None:
    response = editor.post(ADD, rule_form(**fields))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert message in " ".join(errors[field])
    assert not Policy.objects.exists()


def test_staff_without_the_permission_cannot_edit_rules() -> None:
    user = reviewer("alice")
    client = Client()
    client.force_login(user)
    assert client.get(ADD).status_code == 403
    assert client.post(ADD, rule_form()).status_code == 403
    assert client.post(ADD, {**rule_form(), "_dry_run": "1"}).status_code == 403
    assert not Policy.objects.exists()


def test_a_dry_run_lists_the_reviews_the_rule_would_have_matched_and_saves_nothing(
    editor: Client, queued: list[Any]
) -> None:
    small, large, huge = mirrored(30), mirrored(300), mirrored(9000)
    response = editor.post(ADD, {**rule_form(), "_dry_run": "Dry run"})
    assert response.status_code == 200
    assert not Policy.objects.exists()
    matched = [row["review"].pk for row in response.context["dry_run"]["matched"]]
    assert matched == [huge.pk, large.pk]
    page = response.content.decode()
    assert "It would have matched 2 of the last 3 reviews." in page
    assert f"{large.pk}/review/" in page and f"/review/{small.pk}/review/" not in page
    # The form keeps what was typed, ready to save.
    assert response.context["adminform"].form["tool"].value() == "refund_*"

    broken = editor.post(ADD, {**rule_form(conditions="[{}]"), "_dry_run": "Dry run"})
    assert broken.status_code == 200
    assert broken.context["dry_run"]["matched"] is None
    assert "conditions" in broken.context["adminform"].form.errors


def test_queue_and_screen_show_approvals_and_overdue(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice = reviewer("alice", finance)
    bob = reviewer("bob", finance)
    client = Client()
    client.force_login(alice)
    screen = f"/admin/nitro_assistants/review/{review.pk}/review/"
    page = client.get(screen).content.decode()
    assert "large refunds" in page and "0 of 2 approvals · waiting for someone in Finance" in page

    stamp = approve(review)
    response = client.post(
        screen,
        {"call-0-action": "approve", "revision": stamp["revision"], "digest": stamp["digest"]},
        follow=True,
    )
    assert Approval.objects.filter(review=review, user=alice).exists(), response.content.decode()[
        :3000
    ]
    assert "Your approval of review" in response.content.decode()
    assert "1 of 2 approvals · waiting for someone in Finance" in response.content.decode()

    ReviewHandling.objects.filter(review=review).update(
        due_at=timezone.now() - datetime.timedelta(minutes=5)
    )
    client.force_login(bob)
    queue = client.get(reverse("admin:nitro_assistants_review_changelist")).content.decode()
    assert "1 of 2 approvals · waiting for someone in Finance" in queue
    assert "nitro-overdue" in queue
    overdue = client.get(reverse("admin:nitro_assistants_review_changelist") + "?deadline=overdue")
    assert list(overdue.context["cl"].result_list) == [Review.objects.get(pk=review.pk)]
    soon = client.get(reverse("admin:nitro_assistants_review_changelist") + "?deadline=soon")
    assert list(soon.context["cl"].result_list) == []


def test_the_decide_api_counts_approvals_and_refuses_outsiders(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    from nitro_assistants.models import ApiKey

    review = mirrored(300)
    keys = {
        name: ApiKey.generate(user, "tests")[1]
        for name, user in (
            ("alice", reviewer("alice", finance)),
            ("bob", reviewer("bob", finance)),
            ("eve", reviewer("eve")),
        )
    }
    client = Client()

    def decide(name: str) -> Any:
        body = {**approve(review)}
        return client.post(
            f"/nitro/api/reviews/{review.pk}/decide",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {keys[name]}",
        )

    outsider = decide("eve")
    assert outsider.status_code == 403
    assert outsider.json()["code"] == "forbidden"
    assert "Only members of Finance" in outsider.json()["message"]
    first = decide("alice")
    assert first.status_code == 200
    assert first.json()["status"] == "pending"  # one approval of two: not applied
    assert decide("alice").json()["status"] == "pending"  # the same person does not count twice
    assert Approval.objects.filter(review=review).count() == 1
    assert decide("bob").json()["status"] == "decided"


def test_bulk_approve_reports_approvals_that_wait_for_a_quorum(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    large, plain = mirrored(300), mirrored(80)
    client = Client()
    client.force_login(reviewer("alice", finance))
    response = client.post(
        reverse("admin:nitro_assistants_review_changelist"),
        {"action": "approve_selected", "post": "yes", "_selected_action": [large.pk, plain.pk]},
        follow=True,
    )
    shown = [str(m) for m in response.context["messages"]]
    assert "1 approval counted on a review that needs more before it is applied." in shown
    assert "1 review approved." in shown
    assert Review.objects.get(pk=large.pk).status == "pending"
    assert Review.objects.get(pk=plain.pk).status == "decided"


def test_the_screen_says_why_a_reviewer_outside_the_group_cannot_decide(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    client = Client()
    client.force_login(reviewer("eve"))
    stamp = approve(review)
    response = client.post(
        f"/admin/nitro_assistants/review/{review.pk}/review/",
        {"call-0-action": "approve", "revision": stamp["revision"], "digest": stamp["digest"]},
    )
    assert response.status_code == 403
    assert "Only members of Finance may decide this review" in response.content.decode()
    assert not Approval.objects.exists()


def test_the_first_submit_button_of_the_rule_form_saves(editor: Client) -> None:
    # Enter in a field presses the form's first submit button; the Dry run's comes before the
    # Save row on the page, so a Save goes first (issue 40, item 17).
    page = editor.get(ADD).content.decode()
    form = page[page.index('id="policy_form"') :]
    buttons = re.findall(r'<input type="submit"[^>]* name="(\w+)"', form)
    assert buttons[0] == "_save" and "_dry_run" in buttons, buttons


def test_approving_again_says_you_had_already_approved_and_who_is_awaited(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    client = Client()
    client.force_login(reviewer("alice", finance))
    screen = f"/admin/nitro_assistants/review/{review.pk}/review/"
    stamp = approve(review)
    body = {"call-0-action": "approve", "revision": stamp["revision"], "digest": stamp["digest"]}

    def told() -> list[str]:
        response = client.post(screen, body, follow=True)
        return [str(m) for m in response.context["messages"]]

    first = told()
    assert first == [
        f"Your approval of review #{review.pk} is recorded: "
        "1 of 2 approvals · waiting for someone in Finance."
    ]
    (again,) = told()  # the same form sent again (a second tab, the back button)
    assert again.startswith(f"You had already approved review #{review.pk} (")
    assert again.endswith(
        "); it is not counted twice: 1 of 2 approvals · waiting for someone in Finance."
    )
    assert "is recorded" not in again
    assert Approval.objects.filter(review=review).count() == 1


def test_a_form_rendered_before_a_quorum_edit_is_stale_not_a_change_of_the_reviewers(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    from nitro_assistants import services

    review = mirrored(300)
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    screen = f"/admin/nitro_assistants/review/{review.pk}/review/"
    client = Client()
    client.force_login(bob)
    assert client.get(screen).status_code == 200  # bob opens the review: amount 300, revision 1
    shown = approve(review)
    edit = {"tool_calls": [{"id": "call_0", "action": "edit", "args": {"amount": 250}}]}
    services.decide(
        review.pk, alice, {**edit, "revision": shown["revision"], "digest": shown["digest"]}
    )
    review.refresh_from_db()
    assert review.revision == 2 and review.tool_calls[0]["args"]["amount"] == 250

    # Bob approves what he was shown, touching nothing: the form posts amount 300.
    response = client.post(
        screen,
        {
            "call-0-action": "approve",
            "call-0-arg__order_id": "7",
            "call-0-arg__amount": "300",
            "call-0-message": "",
            "revision": shown["revision"],
            "digest": shown["digest"],
        },
    )
    page = response.content.decode()
    assert response.status_code == 409, page[:3000]  # as the API answers it
    assert "This form is out of date" in page
    assert f"review #{review.pk} changed since you opened it (it is at revision 2 now)" in page
    assert "but chose Approve" not in page
    assert Approval.objects.filter(review=review, user=bob).count() == 0

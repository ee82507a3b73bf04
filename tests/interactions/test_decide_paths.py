"""One decide path for every kind: on the admin's review screen and its bulk actions, a decision
on content that changed since it was shown is refused, and the same decision posted twice is
recorded once. (The JSON API's side of the same rules: tests/interactions/test_api_reviews.py.)"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from nitro_assistants.client import PendingReview
from nitro_assistants.models import Decision, Review, Thread
from nitro_assistants.services.mirror import mirror_pending
from tests.admin.conftest import make_reply_review, make_tool_review
from tests.interactions.conftest import BLUEPRINT, QUESTIONS, plan, step

pytestmark = pytest.mark.django_db

QUEUE = "/admin/nitro_assistants/review/"
KINDS = ["tool_calls", "reply", "question", "blueprint", "plan"]

#: What the review screen posts for each kind: a valid, ordinary decision.
DECISIONS: dict[str, dict[str, Any]] = {
    "tool_calls": {"call-0-action": "approve"},
    "reply": {"reply-action": "approve"},
    "question": {"interaction-decision": "answer", "q-0-options": "fri", "q-1-text": "after 3"},
    "blueprint": {"interaction-decision": "accept"},
    "plan": {"interaction-decision": "approve"},
}


def screen(review: Review) -> str:
    return f"{QUEUE}{review.pk}/review/"


def shown(review: Review) -> dict[str, Any]:
    """The stamp the review screen renders: what the reviewer was shown."""
    return {
        "interrupt_id": review.interrupt_id or "",
        "revision": review.revision,
        "digest": review.digest,
    }


@pytest.fixture
def make(interaction: Any, registered_operations: Any) -> Callable[[str], Review]:
    def build(kind: str) -> Review:
        if kind == "tool_calls":
            return make_tool_review()
        if kind == "reply":
            return make_reply_review()
        content = {"question": QUESTIONS, "blueprint": BLUEPRINT, "plan": plan(step("s1"))}[kind]
        return interaction(kind, content, interaction_id=f"int-{kind}")

    return build


def changed(review: Review, interaction: Any) -> Review:
    """The thread moves on to new content while the reviewer's page still shows the old: a new
    revision of the interaction, or a new pause replacing the held calls or reply."""
    if review.kind in ("question", "blueprint", "plan"):
        content = {
            "question": [*QUESTIONS[:1]],
            "blueprint": {**BLUEPRINT, "costClass": "high"},
            "plan": plan(step("s1"), step("s2")),
        }[review.kind]
        return interaction(review.kind, content, interaction_id=review.interaction_id)
    pause = uuid.uuid4().hex
    newer = PendingReview(
        kind="tool_calls",
        interrupt_id=pause,
        interrupt_ids=[pause],
        tool_calls=[
            {
                "previous_message_id": "h1",
                "id": "call_2",
                "name": "cancel_appointment",
                "args": {"appointment_id": 42},
                "allowed_decisions": ["approve", "reject"],
            }
        ],
    )
    with transaction.atomic():
        thread = Thread.objects.select_for_update().get(pk=review.thread_id)
        replaced = mirror_pending(thread, None, newer)
    assert replaced is not None
    return replaced


@pytest.mark.parametrize("kind", KINDS)
def test_the_review_screen_refuses_a_decision_on_content_that_changed(
    kind: str,
    make: Callable[[str], Review],
    interaction: Any,
    admin_client: Client,
    run_tasks_inline: Any,
) -> None:
    review = make(kind)
    was = shown(review)  # the page the reviewer has open
    newer = changed(review, interaction)
    response = admin_client.post(screen(review), {**was, **DECISIONS[kind]})
    assert response.status_code == 409
    assert "no longer" in response.content.decode() or "changed" in response.content.decode()
    assert not Decision.objects.exists()
    assert Review.objects.get(pk=newer.pk).status == "pending"  # the new content is untouched


@pytest.mark.parametrize("kind", KINDS)
def test_the_review_screen_refuses_a_digest_it_was_not_rendered_from(
    kind: str, make: Callable[[str], Review], admin_client: Client, run_tasks_inline: Any
) -> None:
    review = make(kind)
    forged = {**shown(review), "digest": "0" * 64}
    response = admin_client.post(screen(review), {**forged, **DECISIONS[kind]})
    assert response.status_code == 409
    assert not Decision.objects.exists()
    assert Review.objects.get(pk=review.pk).status == "pending"


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_decision_posted_twice_on_the_review_screen_is_recorded_once(
    kind: str, make: Callable[[str], Review], admin_client: Client, run_tasks_inline: Any
) -> None:
    review = make(kind)
    data = {**shown(review), **DECISIONS[kind]}
    first = admin_client.post(screen(review), data)
    assert first.status_code == 302, first.content.decode()[:2000]
    second = admin_client.post(screen(review), data)  # a double click, a resent form
    assert second.status_code == 302, second.content.decode()[:2000]
    assert Decision.objects.count() == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_different_decision_after_one_is_recorded_is_refused_as_stale(
    kind: str, make: Callable[[str], Review], admin_client: Client, run_tasks_inline: Any
) -> None:
    review = make(kind)
    data = {**shown(review), **DECISIONS[kind]}
    assert admin_client.post(screen(review), data).status_code == 302
    other = {
        "tool_calls": {"call-0-action": "reject", "call-0-message": "no"},
        "reply": {"reply-action": "reject", "reply-message": "no"},
        "question": {"interaction-decision": "cancel"},
        "blueprint": {"interaction-decision": "cancel"},
        "plan": {"interaction-decision": "cancel"},
    }[kind]
    response = admin_client.post(screen(review), {**shown(review), **other})
    assert response.status_code == 409
    assert Decision.objects.count() == 1


def bulk(client: Client, action: str, reviews: list[Review], stamps: dict[int, str]) -> Any:
    data: dict[str, Any] = {
        "action": action,
        "_selected_action": [str(r.pk) for r in reviews],
        "post": "yes",
        "reason": "Not today",
    }
    data.update({f"nitro-shown-{pk}": value for pk, value in stamps.items()})
    return client.post(QUEUE, data, follow=True)


@pytest.mark.parametrize("kind", ["tool_calls", "reply"])
@pytest.mark.parametrize("action", ["approve_selected", "reject_selected"])
def test_bulk_refuses_a_row_whose_content_changed_since_the_queue_showed_it(
    kind: str,
    action: str,
    make: Callable[[str], Review],
    interaction: Any,
    admin_client: Client,
    run_tasks_inline: Any,
) -> None:
    review = make(kind)
    fine = make(kind)
    page = admin_client.get(QUEUE).content.decode()
    assert f'name="nitro-shown-{review.pk}" value="{review.revision}:{review.digest}"' in page
    stamps = {r.pk: f"{r.revision}:{r.digest}" for r in (review, fine)}
    changed(review, interaction)
    response = bulk(admin_client, action, [review, fine], stamps)
    text = response.content.decode()
    assert f"Review #{review.pk} refused" in text
    assert list(Decision.objects.values_list("review_id", flat=True)) == [fine.pk]


@pytest.mark.parametrize("kind", ["tool_calls", "reply"])
def test_bulk_refuses_a_digest_the_queue_did_not_show(
    kind: str, make: Callable[[str], Review], admin_client: Client, run_tasks_inline: Any
) -> None:
    review = make(kind)
    response = bulk(admin_client, "approve_selected", [review], {review.pk: f"1:{'0' * 64}"})
    assert f"Review #{review.pk} refused" in response.content.decode()
    assert not Decision.objects.exists()


@pytest.mark.parametrize("kind", ["tool_calls", "reply"])
@pytest.mark.parametrize("action", ["approve_selected", "reject_selected"])
def test_the_same_bulk_decision_posted_twice_is_recorded_once(
    kind: str,
    action: str,
    make: Callable[[str], Review],
    admin_client: Client,
    run_tasks_inline: Any,
) -> None:
    reviews = [make(kind), make(kind)]
    stamps = {r.pk: f"{r.revision}:{r.digest}" for r in reviews}
    bulk(admin_client, action, reviews, stamps)
    again = bulk(admin_client, action, reviews, stamps)
    assert "refused" not in again.content.decode()
    assert Decision.objects.count() == 2


@pytest.mark.parametrize("kind", ["question", "blueprint", "plan"])
def test_bulk_never_decides_an_interaction(
    kind: str, make: Callable[[str], Review], admin_client: Client, run_tasks_inline: Any
) -> None:
    review = make(kind)
    stamps = {review.pk: f"{review.revision}:{review.digest}"}
    for action in ("approve_selected", "reject_selected"):
        response = bulk(admin_client, action, [review], stamps)
        assert f"Review #{review.pk} refused" in response.content.decode()
    assert not Decision.objects.exists()

"""The admin's audit trail export actions on threads and reviews."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from nitro_assistants.models import AuditChain
from nitro_assistants.services.audit import record_event
from tests.factories import ReviewFactory, ThreadFactory

pytestmark = pytest.mark.django_db


def download(client: Client, model: str, pks: list[int], action: str) -> Any:
    return client.post(
        reverse(f"admin:nitro_assistants_{model}_changelist"),
        {"action": action, "_selected_action": [str(pk) for pk in pks]},
    )


def body(response: Any) -> str:
    return b"".join(response.streaming_content).decode()


def test_export_the_selected_threads_as_jsonl(looker_client: Client) -> None:
    picked, other = ThreadFactory(), ThreadFactory()
    for thread in (picked, other):
        record_event(thread, "run_requested", messages=[{"content": "hi"}])
        record_event(thread, "run_succeeded", reply="ok")
    response = download(looker_client, "thread", [picked.pk], "export_audit_jsonl")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert response["Content-Disposition"].startswith('attachment; filename="audit-trail-')
    rows = [json.loads(line) for line in body(response).splitlines()]
    assert [r.get("verb") for r in rows] == ["run_requested", "run_succeeded", None]
    assert {r.get("thread") for r in rows[:2]} == {str(picked.thread_id)}
    head = AuditChain.objects.get(chain=str(picked.thread_id))
    assert rows[-1] == {"chain_head": {"chain": head.chain, "seq": 2, "hash": head.hash}}


def test_export_the_selected_reviews_threads_as_csv(looker_client: Client) -> None:
    review = ReviewFactory()
    record_event(review.thread, "review_requested", review=review, kind=review.kind)
    ReviewFactory()  # another thread's review, not selected
    response = download(looker_client, "review", [review.pk], "export_audit_csv")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(body(response))))
    assert [(r["verb"], r["review"]) for r in rows] == [
        ("review_requested", str(review.pk)),
        ("chain_head", ""),
    ]


def test_the_export_needs_the_view_permission(client: Client, django_user_model: Any) -> None:
    nobody = django_user_model.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(nobody)
    thread = ThreadFactory()
    response = download(client, "thread", [thread.pk], "export_audit_jsonl")
    assert response.status_code == 403


def test_an_event_page_shows_its_link_in_the_chain(looker_client: Client) -> None:
    thread = ThreadFactory()
    first = record_event(thread, "run_requested")
    second = record_event(thread, "run_succeeded", reply="ok")
    page = looker_client.get(f"/admin/nitro_assistants/event/{second.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert second.hash in text and first.hash in text  # its own hash and the one it follows

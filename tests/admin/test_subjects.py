"""Who and what a conversation is about (``THREAD_SUBJECT``): computed into ``Thread.subject`` as
the thread is saved, shown in the queue, the thread list and the review screen, and searched,
with the rest of what a reviewer would type: message text, tool names, reply text, the start of
a thread id."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import requests
from django.core.management import call_command
from django.db import connection
from django.test import Client

from nitro_assistants.admin.search import review_matches
from nitro_assistants.checks import check_settings
from nitro_assistants.models import Review, Thread
from tests.admin.conftest import make_reply_review, make_tool_review, review_url
from tests.factories import ThreadFactory

pytestmark = pytest.mark.django_db
QUEUE = "/admin/nitro_assistants/review/"
THREADS = "/admin/nitro_assistants/thread/"
CUSTOMER = {"customer": {"name": "Jane Doe"}, "phone": "+1 555 0100", "order_id": 1234}
BY_KEYS = ["customer.name", "phone", ("order", "order_id")]


def describe_for_test(thread: Any) -> str:
    return f"{thread.context.get('customer', {}).get('name', '?')} via {thread.assistant_key}"


def failing_describer(thread: Any) -> str:
    raise RuntimeError("CRM down")


@pytest.fixture
def by_keys(settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "THREAD_SUBJECT": BY_KEYS}


def test_keys_of_the_context_make_the_subject(by_keys: None) -> None:
    thread = ThreadFactory(context=CUSTOMER)
    assert thread.subject == "Jane Doe · +1 555 0100 · order 1234"
    assert Thread.objects.get(pk=thread.pk).subject == thread.subject
    # A key that is missing is left out, not shown as "None".
    assert ThreadFactory(context={"phone": "+44 20"}).subject == "+44 20"


def test_the_subject_follows_the_context_and_the_mirrored_messages(
    by_keys: None, settings: Any
) -> None:
    thread = ThreadFactory(context={"phone": "+1 555 0100"})
    thread.context = CUSTOMER
    thread.save(update_fields=["context", "updated_at"])  # as start_run sets a new context
    assert Thread.objects.get(pk=thread.pk).subject == "Jane Doe · +1 555 0100 · order 1234"
    # Without the setting, the customer's first message describes the thread; it is written
    # when the mirror saves the snapshot (update_fields without "subject").
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "THREAD_SUBJECT": None}
    thread.values = {
        "messages": [
            {"type": "human", "content": "\n  My parcel never came.  \nOrder 77."},
            {"type": "ai", "content": "Sorry to hear that."},
        ]
    }
    thread.save(update_fields=["values", "status", "synced_at", "updated_at"])
    assert Thread.objects.get(pk=thread.pk).subject == "My parcel never came."
    # A save that touches neither leaves it alone (no describer call per status change).
    Thread.objects.filter(pk=thread.pk).update(subject="kept")
    thread.refresh_from_db()
    thread.status = Thread.Status.IDLE
    thread.save(update_fields=["status"])
    assert Thread.objects.get(pk=thread.pk).subject == "kept"


def describe_from_metadata(thread: Any) -> str:
    return f"{thread.metadata.get('customer_name')} (CRM {thread.metadata.get('crm_id')})"


def test_keys_are_looked_up_in_the_context_then_in_the_thread_metadata(by_keys: None) -> None:
    # All from the metadata the host started the thread with (start_run(..., metadata=...)).
    thread = ThreadFactory(metadata=CUSTOMER)
    assert thread.subject == "Jane Doe · +1 555 0100 · order 1234"
    # Some from each: a key the context lacks is read from the metadata.
    mixed = ThreadFactory(context={"order_id": 99}, metadata={"customer": {"name": "Ann Lee"}})
    assert mixed.subject == "Ann Lee · order 99"
    # Both have it: the context's value, as before metadata was read (existing settings keep
    # their meaning); a structure or a blank in the context does not hide the metadata's.
    both = ThreadFactory(
        context={"phone": "+44 20", "customer": {"name": "  "}},
        metadata={"phone": "+1 555 0100", "customer": {"name": "Jane Doe"}},
    )
    assert both.subject == "Jane Doe · +44 20"


def test_the_subject_follows_the_metadata(by_keys: None) -> None:
    thread = ThreadFactory(values={"messages": [{"type": "human", "content": "Hi there"}]})
    assert thread.subject == "Hi there"
    thread.metadata = {"customer": {"name": "Jane Doe"}}
    thread.save(update_fields=["metadata", "updated_at"])  # as start_run merges new metadata
    assert Thread.objects.get(pk=thread.pk).subject == "Jane Doe"


def test_a_callable_reads_the_thread_metadata(settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "THREAD_SUBJECT": "tests.admin.test_subjects.describe_from_metadata",
    }
    thread = ThreadFactory(metadata={"customer_name": "Jane Doe", "crm_id": "C-7"})
    assert thread.subject == "Jane Doe (CRM C-7)"


def test_a_callable_describes_the_thread_and_its_failure_loses_nothing(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "THREAD_SUBJECT": "tests.admin.test_subjects.describe_for_test",
    }
    assert ThreadFactory(context=CUSTOMER, assistant_key="sms").subject == "Jane Doe via sms"
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "THREAD_SUBJECT": "tests.admin.test_subjects.failing_describer",
    }
    with caplog.at_level(logging.ERROR, logger="nitro_assistants.subjects"):
        thread = ThreadFactory(values={"messages": [{"type": "human", "content": "Hi there"}]})
    assert Thread.objects.filter(pk=thread.pk).exists()  # the thread is stored regardless
    assert thread.subject == "Hi there"
    assert "THREAD_SUBJECT" in caplog.text and "CRM down" in caplog.text


def test_a_long_subject_is_cut_to_the_column(settings: Any) -> None:
    thread = ThreadFactory(values={"messages": [{"type": "human", "content": "word " * 100}]})
    assert len(thread.subject) == 200 and thread.subject.endswith("…")


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("tests.admin.test_subjects.nowhere", "cannot be imported"),
        ("tests.admin.test_subjects.BY_KEYS", "is not callable"),
        ([("order",)], "neither a key nor a (label, key) pair"),
        ({"name": "x"}, "not a list of keys"),
    ],
)
def test_a_bad_setting_is_a_system_check_error(settings: Any, setting: Any, problem: str) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "THREAD_SUBJECT": setting}
    errors = [e for e in check_settings() if e.id == "nitro_assistants.E016"]
    assert len(errors) == 1 and problem in errors[0].msg


def test_good_settings_pass_the_check(settings: Any) -> None:
    for setting in (None, BY_KEYS, "tests.admin.test_subjects.describe_for_test"):
        settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "THREAD_SUBJECT": setting}
        assert not [e for e in check_settings() if e.id == "nitro_assistants.E016"]


def test_queue_thread_list_and_review_screen_show_who_it_is_about(
    by_keys: None, reviewer_client: Client, superuser_client: Client
) -> None:
    review = make_tool_review()
    thread = review.thread
    thread.context = CUSTOMER
    thread.save()
    about = "Jane Doe · +1 555 0100 · order 1234"
    queue = reviewer_client.get(QUEUE).content.decode()
    assert f">{about}</a>" in queue and f"{thread.short_id}…" in queue
    threads = superuser_client.get(THREADS).content.decode()
    assert f">{about}</a>" in threads
    bulk = reviewer_client.post(
        QUEUE, {"action": "approve_selected", "_selected_action": [review.pk]}
    ).content.decode()
    assert f"<li>#{review.pk} · {about} · tool calls" in bulk  # the confirmation page too
    screen = reviewer_client.get(review_url(review)).content.decode()
    assert f"<title>{about} | Decide review #{review.pk} (tool calls) |" in screen
    assert f"<h2>{about}</h2>" in screen


def test_lists_never_show_a_bare_id(reviewer_client: Client, superuser_client: Client) -> None:
    review = make_reply_review("Your parcel ships on Friday.")
    silent = ThreadFactory()  # nothing mirrored yet
    html = reviewer_client.get(QUEUE).content.decode()
    assert ">Can I move my appointment to Tuesday?</a>" in html
    threads = superuser_client.get(THREADS).content.decode()
    assert (
        f'>(no message yet)</a> <span class="nitro-muted nitro-short-id">{silent.short_id}…'
        in threads
    )
    assert review.thread.subject in threads


def test_search_finds_subject_messages_tools_replies_and_id_prefixes(
    by_keys: None, reviewer_client: Client, superuser_client: Client
) -> None:
    tool = make_tool_review(ask="My boiler is leaking")
    tool.thread.context = CUSTOMER
    tool.thread.save()
    other = make_tool_review(
        [{"id": "c9", "name": "cancel_appointment", "args": {"id": 7}, "allowed_decisions": []}]
    )
    reply = make_reply_review("Your parcel ships on Friday")

    def queue(term: str) -> set[int]:
        response = reviewer_client.get(QUEUE, {"q": term})
        return {r.pk for r in response.context["cl"].result_list}

    def threads(term: str) -> set[int]:
        response = superuser_client.get(THREADS, {"q": term})
        return {t.pk for t in response.context["cl"].result_list}

    assert queue("jane doe") == {tool.pk}  # the subject
    assert queue("555 0100") == {tool.pk}
    assert queue("boiler") == {tool.pk}  # message text
    assert queue("cancel_appointment") == {other.pk}  # a tool name
    assert queue("parcel SHIPS") == {reply.pk}  # reply text
    assert queue(tool.thread.short_id[:6]) == {tool.pk}  # the start of the id
    assert queue(str(tool.thread.thread_id)) == {tool.pk}
    assert queue("nothing like this") == set()
    assert threads("jane") == {tool.thread_id}
    assert threads("boiler") == {tool.thread_id}
    assert threads(reply.thread.short_id) == {reply.thread_id}
    assert threads(str(other.thread.thread_id)) == {other.thread_id}


def plan_of(queryset: Any) -> str:
    with connection.cursor() as cursor:
        # A test table is tiny: a scan of the whole table (or of its primary key index) costs
        # less than any index there. Leave the planner only bitmap scans, which are how a GIN
        # index is read, to see which index it would take.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SET LOCAL enable_indexonlyscan = off")
        sql, params = queryset.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.postgresql("trigram indexes exist on PostgreSQL only")
def test_search_expressions_are_served_by_the_trigram_indexes(by_keys: None) -> None:
    make_tool_review()
    # The queue's search: what is held, the subject and the messages, each by its index (an OR
    # across the join, as first written, used none for the payload).
    plan = plan_of(Review.objects.filter(status="pending").filter(review_matches("jane")))
    for index in (
        "nitro_review_payload_trgm",
        "nitro_thread_subject_trgm",
        "nitro_thread_values_trgm",
    ):
        assert index in plan, plan
    assert "nitro_thread_id_trgm" in plan_of(Thread.objects.filter(thread_id__istartswith="abcd1"))


def test_migrations_are_in_step_with_the_models() -> None:
    call_command("makemigrations", "nitro_assistants", "--check", "--dry-run", verbosity=0)


@pytest.mark.server
def test_metadata_given_to_start_run_is_on_the_servers_thread_the_mirror_and_the_queue(
    settings: Any, langgraph_server: Any, reviewer_client: Client, superuser_client: Client
) -> None:
    """The real server: metadata a host starts a thread with lands on the server's thread (the
    run creates it, or POST /threads seeds it), on Thread.metadata, in the subject the queue
    shows and searches; metadata given later is merged into both."""
    from nitro_assistants import services

    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "BASE_URL": langgraph_server.url,
        "THREAD_SUBJECT": ["customer_name", "phone", ("order", "order_id")],
    }
    customer = {"customer_name": "Jane Doe", "phone": "+1 555 0100", "order_id": 1234}

    def server_metadata(thread: Thread) -> dict[str, Any]:
        response = requests.get(f"{langgraph_server.url}/threads/{thread.thread_id}", timeout=10)
        response.raise_for_status()
        return dict(response.json()["metadata"])

    # Outside a test transaction's commit nothing is enqueued: the task's work runs here.
    run = services.start_run(
        "walkthrough", "Can I move my appointment to Tuesday?", metadata=customer
    )
    services.execute_run(run.pk)
    thread = Thread.objects.get(pk=run.thread_id)
    review = Review.objects.get(thread=thread, status=Review.Status.PENDING)
    assert thread.metadata == customer
    assert customer.items() <= server_metadata(thread).items()
    about = "Jane Doe · +1 555 0100 · order 1234"
    assert thread.subject == about
    queue = reviewer_client.get(QUEUE).content.decode()
    assert f">{about}</a>" in queue
    found = reviewer_client.get(QUEUE, {"q": "jane doe"}).context["cl"].result_list
    assert [r.pk for r in found] == [review.pk]
    page = superuser_client.get(f"{THREADS}{thread.pk}/change/").content.decode()
    assert about in page
    assert "customer_name" in page  # the metadata, shown on the thread's page

    # A thread seeded with history is created by POST /threads: the metadata goes there.
    history = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": "reply: Thanks, that is all."},
    ]
    seeded = services.start_run("walkthrough", history, metadata={"customer_name": "Ann Lee"})
    services.execute_run(seeded.pk)
    seeded_thread = Thread.objects.get(pk=seeded.thread_id)
    assert server_metadata(seeded_thread)["customer_name"] == "Ann Lee"
    assert seeded_thread.subject == "Ann Lee"

    # Later metadata of an existing thread: merged here (subject recomputed) and on the server.
    later = services.start_run(
        thread, "reply: Never mind, keep Monday.", metadata={"order_id": 5678}
    )
    services.execute_run(later.pk)
    thread.refresh_from_db()
    assert thread.metadata == {**customer, "order_id": 5678}
    assert server_metadata(thread)["order_id"] == 5678
    assert thread.subject == "Jane Doe · +1 555 0100 · order 5678"
    found = reviewer_client.get(QUEUE, {"q": "order 5678"}).context["cl"].result_list
    assert [r.thread_id for r in found] == [thread.pk]

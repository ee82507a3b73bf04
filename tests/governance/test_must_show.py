"""No approval of what was not shown (issue 38): a rule names the arguments an approval needs
shown (``must_show``); an approval of such a part that was collapsed and not opened, or
redacted and not revealed, is refused on every channel that approves, and the decision records
what was shown. Through the real mirror and decide paths (scripted server: nothing is sent)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from nitro_assistants import policy_rules, previews, services
from nitro_assistants.admin import content
from nitro_assistants.client import PendingReview
from nitro_assistants.exceptions import InteractionDecisionError
from nitro_assistants.models import ApiKey, Decision, Event, Policy, Review, Run, Thread
from nitro_assistants.services import slack
from nitro_assistants.services.mirror import mirror_pending
from tests.governance.conftest import reviewer

LONG = "A paragraph the customer wrote. " * 30  # 960 characters: drawn collapsed
CARD = "4111 1111 1111 1111"


# -- what "collapsed" is, and the parts (pure) ---------------------------------------------------


def test_a_value_is_collapsed_past_600_characters_or_at_10_lines() -> None:
    assert not previews.is_long("x" * 600)
    assert previews.is_long("x" * 601)
    assert not previews.is_long("\n".join(["a"] * 10))  # 9 line breaks: 10 lines
    assert previews.is_long("\n".join(["a"] * 11))


def test_the_collapsed_values_are_the_ones_the_review_screen_folds() -> None:
    args = {
        "short": "fine",
        "body": LONG,
        "flag": True,
        "customer": {"note": LONG, "name": "Ada"},
        # Nested deeper than two levels: drawn as indented JSON, folded when that is long.
        "deep": {"a": {"b": {"c": LONG}}},
        "items": ["x", LONG],
    }
    assert previews.collapsed_args(args, "tool_calls.0.args") == [
        "tool_calls.0.args.body",
        "tool_calls.0.args.customer.note",
        "tool_calls.0.args.deep.a.b",
        "tool_calls.0.args.items.1",
    ]
    # The review screen draws exactly these folded (admin/content.py, the same measure).
    drawn = content.key_values(args, 0, "tool_calls.0.args")
    assert folded(drawn) == previews.collapsed_args(args, "tool_calls.0.args")


def folded(rows: list[Any]) -> list[str]:
    found: list[str] = []

    def walk(shown: Any) -> None:
        if shown.long:
            found.append(shown.path)
        for row in shown.rows:
            walk(row.value)
        for item in shown.items:
            walk(item)

    for row in rows:
        walk(row.value)
    return found


def test_a_part_is_opened_by_itself_by_what_holds_it_or_by_each_fold_within() -> None:
    deep = {"a": {"b": {"c": LONG}}}
    payload = {"tool_calls": [{"id": "c", "name": "t", "args": {"deep": deep}}]}
    (part,) = previews.parts(payload, ["tool_calls.0.args.deep.a.b.c"])
    assert part.folds == ("tool_calls.0.args.deep.a.b",) and not part.redacted
    assert previews.opened(part, ["tool_calls.0.args.deep.a.b"])  # the JSON that holds it
    assert previews.opened(part, ["tool_calls.0.args.deep.a.b.c"])  # itself, as a client says
    (whole,) = previews.parts(payload, ["tool_calls.0.args.deep"])
    assert not previews.opened(whole, ["tool_calls.0.args.deep.a.x"])
    assert previews.opened(whole, ["tool_calls.0.args.deep.a.b"])  # each fold within opened
    assert not previews.opened(part, ["tool_calls.0.args.other"])
    assert previews.parts(payload, ["tool_calls.0.args.missing"]) == []  # nothing to show


def test_a_rule_names_paths_in_the_conditions_syntax_and_refuses_others() -> None:
    rule = policy_rules.clean_rule(id=1, must_show=["$.body", "items[0].sku"])
    assert rule.must_show == (("body",), ("items", 0, "sku"))
    for bad in ("body", ["a..b"], [""], [3], ["x"] * 21):
        with pytest.raises(policy_rules.PolicyError) as caught:
            policy_rules.clean_rule(id=1, must_show=bad)
        assert caught.value.field == "must_show"


def test_a_reviews_handling_names_each_matched_calls_parts_by_their_place() -> None:
    rules = policy_rules.RuleSet(
        [
            policy_rules.clean_rule(id=1, name="mails", tool="send_mail", must_show=["body"]),
            policy_rules.clean_rule(id=2, name="others", tool="lookup"),
        ]
    )
    calls = [{"name": "lookup", "args": {"q": 1}}, {"name": "send_mail", "args": {"body": "x"}}]
    handling = rules.handling("a", "tool_calls", calls)
    assert handling.must_show == ("tool_calls.1.args.body",)
    # The first of equally strict rules gives the handling; the parts to show ride on it.
    assert handling.rule_name == "others"
    alone = rules.handling("a", "tool_calls", [{"name": "x"}, calls[1]])
    assert (alone.rule_name, alone.must_show) == ("mails", ("tool_calls.1.args.body",))
    reply = policy_rules.RuleSet(
        [policy_rules.clean_rule(id=3, kind="reply", must_show=["content"])]
    )
    assert reply.handling("a", "reply", reply={"content": "hi"}).must_show == ("reply.content",)
    # An edit never drops a part to show.
    before = policy_rules.Handling(rule_id=1, must_show=("tool_calls.0.args.body",))
    after = policy_rules.after_edit(before, policy_rules.Handling(rule_id=1, rule_version=2))
    assert after.must_show == ("tool_calls.0.args.body",)


# -- deciding ------------------------------------------------------------------------------------


def mail_pause(body: str = LONG, **more: Any) -> PendingReview:
    interrupt_id = uuid.uuid4().hex
    return PendingReview(
        kind="tool_calls",
        interrupt_id=interrupt_id,
        interrupt_ids=[interrupt_id],
        tool_calls=[
            {
                "previous_message_id": "h1",
                "id": "call_0",
                "name": "send_mail",
                "args": {"to": "team", "body": body, **more},
                "allowed_decisions": ["approve", "edit", "reject"],
            }
        ],
    )


@pytest.fixture
def mail_rule(db: None) -> Policy:
    return Policy.objects.create(name="mails are read", tool="send_mail", must_show=["body"])


def held(pause: PendingReview | None = None) -> Review:
    pause = pause or mail_pause()
    call = {k: pause.tool_calls[0][k] for k in ("id", "name", "args")}
    thread = Thread.objects.create(
        assistant_key="walkthrough",
        values={
            "messages": [
                {"type": "human", "id": "h1", "content": "Mail the team"},
                {"type": "ai", "id": "a1", "content": "", "tool_calls": [call]},
            ]
        },
    )
    run = Run.objects.create(thread=thread, input={})
    review = mirror_pending(thread, run, pause)
    assert review is not None
    return Review.objects.get(pk=review.pk)


def body(review: Review, action: str = "approve", **more: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"id": "call_0", "action": action}
    if action == "edit":
        item["args"] = more.pop("args")
    if action == "reject":
        item["message"] = "no"
    return {
        "revision": review.revision,
        "digest": review.digest,
        "tool_calls": [item],
        **more,
    }


@pytest.mark.django_db
def test_an_approval_of_a_collapsed_required_argument_is_refused_until_it_is_shown(
    mail_rule: Policy, queued: list[Any]
) -> None:
    review = held()
    assert review.handling.rule["must_show"] == ["tool_calls.0.args.body"]
    person = reviewer("ann")
    with pytest.raises(InteractionDecisionError) as caught:
        services.decide(review.pk, person, body(review), via="api")
    assert caught.value.field == "shown"
    assert "tool_calls.0.args.body" in str(caught.value) and "collapsed" in str(caught.value)
    with pytest.raises(InteractionDecisionError):  # shown: something else
        services.decide(review.pk, person, body(review, shown=["tool_calls.0.args.to"]), via="api")
    assert not Decision.objects.exists()  # nothing recorded

    decision = services.decide(
        review.pk, person, body(review, shown=["tool_calls.0.args.body"]), via="api"
    )
    assert isinstance(decision, Decision)
    assert Decision.objects.get().shown == ["tool_calls.0.args.body"]


@pytest.mark.django_db
def test_a_rejection_an_edit_of_the_part_and_host_code_need_no_statement(
    mail_rule: Policy, queued: list[Any]
) -> None:
    person = reviewer("ann")
    review = held()
    rejected = services.decide(review.pk, person, body(review, "reject"), via="api")
    assert isinstance(rejected, Decision) and rejected.shown is None
    review = held()
    edited = services.decide(
        review.pk, person, body(review, "edit", args={"body": "Short now."}), via="api"
    )
    assert isinstance(edited, Decision)  # the reviewer wrote the part: it was shown
    review = held()
    assert isinstance(services.decide(review.pk, None, body(review)), Decision)  # via None


@pytest.mark.django_db
def test_a_short_required_argument_is_shown_whole_and_needs_no_statement(
    mail_rule: Policy, queued: list[Any]
) -> None:
    review = held(mail_pause("Hello."))
    assert isinstance(
        services.decide(review.pk, reviewer("ann"), body(review), via="api"), Decision
    )


@pytest.mark.django_db
@pytest.mark.parametrize("via", ["slack", "email"])
def test_a_channel_that_cannot_show_the_part_refuses_and_says_to_open_the_admin(
    mail_rule: Policy, queued: list[Any], via: str
) -> None:
    review = held()
    with pytest.raises(InteractionDecisionError) as caught:
        services.decide(
            review.pk, reviewer("ann"), body(review, shown=["tool_calls.0.args.body"]), via=via
        )
    assert "open the review in the admin" in str(caught.value)


@pytest.mark.django_db
def test_a_slack_card_offers_no_approve_for_a_collapsed_required_part(
    mail_rule: Policy, queued: list[Any]
) -> None:
    blocks = json.dumps(slack.card(held()))
    assert '"approve"' not in blocks.lower().replace("reject", "")
    assert "open it in the admin" in blocks


@pytest.mark.django_db
def test_a_redacted_required_part_needs_the_audited_reveal_first(
    mail_rule: Policy, queued: list[Any], settings: Any
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "REDACT": True}
    review = held(mail_pause(f"Charge {CARD} please."))
    person = reviewer("ann")
    person.user_permissions.add(Permission.objects.get(codename="reveal_redacted"))
    person = User.objects.get(pk=person.pk)
    stated = body(review, shown=["tool_calls.0.args.body"])
    with pytest.raises(InteractionDecisionError) as caught:
        services.decide(review.pk, person, stated, via="api")
    assert "redacted" in str(caught.value) and caught.value.field == "shown"
    services.reveal(review, person)  # recorded in the audit chain
    assert isinstance(services.decide(review.pk, person, stated, via="api"), Decision)


# -- the API and the admin -----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_api_read_lists_the_parts_to_show_and_a_decision_without_them_is_a_400(
    mail_rule: Policy, queued: list[Any]
) -> None:
    review = held()
    key = ApiKey.generate(reviewer("ann"), "tests")[1]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    read = client.get(f"/nitro/api/reviews/{review.pk}").json()
    assert read["tool_calls"][0]["must_show"] == [
        {"path": "tool_calls.0.args.body", "collapsed": True, "redacted": False}
    ]
    url = f"/nitro/api/reviews/{review.pk}/decide"
    refused = client.post(url, body(review), content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["details"]["field"] == "shown"
    for wrong in ("all", [1], ["x\u0000"], ["\ud800"], [""], ["x" * 501], ["p"] * 501):
        bad = client.post(
            url, json.dumps(body(review, shown=wrong)), content_type="application/json"
        )
        assert bad.status_code == 400, wrong
        assert bad.json()["details"]["field"].startswith("shown")
    done = client.post(
        url, body(review, shown=["tool_calls.0.args.body"]), content_type="application/json"
    )
    assert done.status_code == 200, done.text
    assert done.json()["decision"]["shown"] == ["tool_calls.0.args.body"]


def admin_post(review: Review, opened: Any = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "interrupt_id": review.interrupt_id or "",
        "revision": review.revision,
        "digest": review.digest,
        "call-0-action": "approve",
        "call-0-arg__to": "team",
        "call-0-arg__body": LONG,
    }
    if opened is not None:
        data["opened"] = opened if isinstance(opened, str) else json.dumps(opened)
    return data


@pytest.mark.django_db
def test_the_admin_refuses_an_approval_with_a_form_error_until_the_part_was_opened(
    mail_rule: Policy, queued: list[Any]
) -> None:
    review = held()
    client = Client()
    client.force_login(reviewer("ann"))
    url = reverse("admin:nitro_assistants_review_review", args=[review.pk])
    screen = client.get(url)
    # Drawn open for a browser without the script; the hidden field says so.
    assert 'data-nitro-path="tool_calls.0.args.body" data-nitro-must-show open' in screen.text
    assert screen.context["stamp"].initial["opened"] == '["tool_calls.0.args.body"]'
    refused = client.post(url, admin_post(review, []))
    assert refused.status_code == 400
    assert "drawn collapsed" in refused.text
    assert client.post(url, admin_post(review, "not json")).status_code == 400
    assert not Decision.objects.exists()
    done = client.post(url, admin_post(review, ["tool_calls.0.args.body"]))
    assert done.status_code == 302
    assert Decision.objects.get().shown == ["tool_calls.0.args.body"]
    decided = client.get(url)  # the decision says what was shown
    assert '<dd class="nitro-shown"><code>tool_calls.0.args.body</code></dd>' in decided.text


@pytest.mark.django_db
def test_bulk_approval_refuses_a_review_with_a_part_to_open(
    mail_rule: Policy, queued: list[Any]
) -> None:
    review = held()
    client = Client()
    client.force_login(reviewer("ann"))
    client.post(
        reverse("admin:nitro_assistants_review_changelist"),
        {"action": "approve_selected", "_selected_action": [review.pk], "post": "yes"},
        follow=True,
    )
    review.refresh_from_db()
    assert review.status == "pending" and not Decision.objects.exists()


@pytest.mark.django_db
def test_the_rule_form_refuses_a_path_it_cannot_read_on_the_field(editor: Client) -> None:
    response = editor.post(
        reverse("admin:nitro_assistants_policy_add"),
        {
            "name": "bad",
            "position": 0,
            "enabled": "on",
            "kind": "",
            "conditions": "[]",
            "mode": "enforce",
            "must_show": '["a..b"]',
            "action": "review",
            "approvals": 1,
            "priority": 0,
            "on_deadline": "",
            "on_escalation_deadline": "",
        },
    )
    assert response.status_code == 200
    assert "must_show" in response.context["adminform"].form.errors
    assert not Policy.objects.exists()


@pytest.mark.django_db
def test_a_call_that_cannot_be_edited_and_is_not_in_the_conversation_folds_its_part_too(
    mail_rule: Policy, queued: list[Any]
) -> None:
    """Its arguments are drawn as rows in the form, not in fields: the part is folded there,
    with its path, so the script records its opening as it does in the conversation."""
    pause = mail_pause()
    pause.tool_calls[0]["allowed_decisions"] = ["approve", "reject"]
    thread = Thread.objects.create(assistant_key="walkthrough")
    run = Run.objects.create(thread=thread, input={})
    review = mirror_pending(thread, run, pause)
    assert review is not None
    client = Client()
    client.force_login(reviewer("ann"))
    screen = client.get(reverse("admin:nitro_assistants_review_review", args=[review.pk]))
    assert screen.text.count('data-nitro-path="tool_calls.0.args.body" data-nitro-must-show') == 1
    assert 'name="call-0-arg__body"' not in screen.text  # no field holds it whole


@pytest.mark.django_db
def test_an_e_mail_does_not_offer_to_approve_a_review_with_a_part_to_open(
    mail_rule: Policy, queued: list[Any], settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from django.core import mail

    from nitro_assistants.services import notifications

    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "NOTIFIERS": {"email": {"BACKEND": "nitro_assistants.services.notifiers.EmailNotifier"}},
        "NOTIFY_BASE_URL": "https://reviews.example.com",
        "INBOUND_EMAIL": {"REPLY_ADDRESS": "reviews+{token}@reply.example.com"},
    }
    person = reviewer("ann")
    person.email = "ann@example.com"
    person.save()
    with django_capture_on_commit_callbacks(execute=True):
        held()  # review_requested queues the reviewer's e-mail
    assert notifications.send_batch("email", person.pk) == 1
    (message,) = mail.outbox
    assert 'reply with one line: "approve"' not in message.body
    assert "open it in the admin" in message.body


@pytest.mark.django_db
def test_each_approval_of_a_quorum_needs_the_part_shown_and_its_event_says_what_was(
    queued: list[Any],
) -> None:
    Policy.objects.create(name="mails by two", tool="send_mail", must_show=["body"], approvals=2)
    review = held()
    ann, bob = reviewer("ann"), reviewer("bob")
    stated = ["tool_calls.0.args.body"]
    first = services.decide(review.pk, ann, body(review, shown=stated), via="api")
    assert not isinstance(first, Decision)  # one of two approvals
    with pytest.raises(InteractionDecisionError):
        services.decide(review.pk, bob, body(review), via="api")
    final = services.decide(review.pk, bob, body(review, shown=stated), via="api")
    assert isinstance(final, Decision) and final.shown == stated
    approved = Event.objects.filter(review=review, verb="review_approved").order_by("pk")
    assert [event.data.get("shown") for event in approved] == [stated, stated]

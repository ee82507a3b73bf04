"""One permission matrix over every admin view of the app and every endpoint of the decide API,
for every kind of caller: anonymous, staff without any permission, staff with the ``view_*``
permissions only ("looker"), a reviewer (``view_*`` + ``nitro_assistants.decide_review``), a
superuser, the non-staff user who opened the session (signed in, or by API key), and two keepers
of API keys: one with the ``*_apikey`` permissions (their own keys only) and one with
``add_apikey_for_others`` too.

The admin views are enumerated from ``admin.site._registry`` (each ``ModelAdmin``'s
``get_urls()``, the custom ones included) and the API endpoints from
``nitro_assistants.api.urls``; a test fails when a view appears that the matrix does not cover.
What each cell expects is what docs/admin.md and docs/api.md promise. No cell answers 500.

Fast: Django's test client, no server (the ``FakeAssistant`` answers where a decision or a sync
would reach one), no broker (decisions enqueue on commit, which never comes in these tests).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db import transaction
from django.test import Client
from django.urls import URLPattern
from django.utils.timezone import now

from nitro_assistants.api import urls as api_urls
from nitro_assistants.models import (
    ApiKey,
    Decision,
    Event,
    Grant,
    Notification,
    NotificationPreference,
    Policy,
    Review,
    SlackUser,
    Stop,
    Thread,
)
from nitro_assistants.testing import FakeAssistant, fake_assistants
from tests.admin.conftest import VIEW_PERMISSIONS, make_tool_review, stamp
from tests.factories import DecisionFactory, DeliveryFactory, RunFactory
from tests.interactions.conftest import QUESTIONS, assert_error

pytestmark = pytest.mark.django_db

APP = "nitro_assistants"
ADMIN = "/admin/nitro_assistants"
API = "/nitro/api"
LOGIN = "/admin/login/"

# -- who is calling ------------------------------------------------------------------------

ANONYMOUS, NOBODY, LOOKER, REVIEWER, SUPERUSER = (
    "anonymous",
    "staff_no_perms",
    "looker",
    "reviewer",
    "superuser",
)
OPENER, OPENER_KEY = "opener_session", "opener_key"
KEYS, KEYS_FOR_OTHERS = "key_keeper", "key_keeper_for_others"
ROLES = [ANONYMOUS, NOBODY, LOOKER, REVIEWER, SUPERUSER, OPENER, OPENER_KEY, KEYS, KEYS_FOR_OTHERS]
KEY_KEEPERS = {SUPERUSER, KEYS, KEYS_FOR_OTHERS}  # list, change, revoke and delete keys
KEY_PERMISSIONS = ["view_apikey", "add_apikey", "change_apikey", "delete_apikey"]
OUTSIDERS = {ANONYMOUS, OPENER, OPENER_KEY}  # not staff: the admin sends them to its login
DECIDERS = {REVIEWER, SUPERUSER}  # may decide reviews in the admin

# -- the objects every view is shown --------------------------------------------------------


@dataclass
class World:
    opener: User
    key: str  # the opener's API key (raw)
    api_key: ApiKey
    thread: Thread  # opened by the opener, pending on a question interaction
    question: Review
    tool_review: Review  # a pending tool-call review (its own thread)
    pks: dict[str, Any] = field(default_factory=dict)  # model name -> a pk to open


def build_world() -> World:
    from nitro_assistants.services.mirror import mirror_pending

    opener = User.objects.create_user("olivia")
    api_key, key = ApiKey.generate(opener, "CRM")
    thread = Thread.objects.create(assistant_key="interactions", opened_by=opener)
    question = ask(thread, mirror_pending)
    tool_review = make_tool_review()
    run = RunFactory(thread=tool_review.thread)
    decision = DecisionFactory(review__thread=tool_review.thread)
    delivery = DeliveryFactory(thread=tool_review.thread)
    event = Event.objects.create(
        thread=tool_review.thread, review=tool_review, verb="review_requested", data={"n": 1}
    )
    pks = {
        "thread": tool_review.thread.pk,
        "run": run.pk,
        "review": tool_review.pk,
        "decision": decision.pk,
        "delivery": delivery.pk,
        "event": event.pk,
        "apikey": api_key.pk,
        "policy": Policy.objects.create(name="refunds", tool="refund_*").pk,
        "notification": Notification.objects.create(
            channel="email", kind="requested", review=tool_review
        ).pk,
        # The opener's own: no staff member but a superuser may open it.
        "notificationpreference": NotificationPreference.objects.create(
            user=opener, enabled=False
        ).pk,
        # Resumed already: a stop in force would freeze the reviews the other cells decide.
        "stop": Stop.objects.create(
            scope=Stop.Scope.ALL, reason="drill", reviews_resumed_at=now(), resumed_at=now()
        ).pk,
        "slackuser": SlackUser.objects.create(slack_user_id="U0OLIVIA", user=opener).pk,
        "grant": Grant.objects.create(
            scope="thread",
            key=str(tool_review.thread_id),
            assistant_key=tool_review.thread.assistant_key,
            tool="reschedule_appointment",
            constraints={"day": {"eq": "Tuesday"}},
            max_uses=1,
            uses_left=1,
            granted_at=now(),
        ).pk,
    }
    return World(opener, key, api_key, thread, question, tool_review, pks)


def ask(thread: Thread, mirror_pending: Callable[..., Review | None]) -> Review:
    """A pending question interaction on ``thread``, mirrored as a real pause arrives."""
    import uuid

    from django.db import transaction

    from nitro_assistants.client import PendingReview

    interrupt_id = uuid.uuid4().hex
    pending = PendingReview(
        kind="question",
        interrupt_id=interrupt_id,
        interrupt_ids=[interrupt_id],
        interaction={
            "interactionId": "int-day",
            "kind": "question",
            "title": "Which day?",
            "summary": "The customer asked to move.",
            "questions": QUESTIONS,
        },
        mode="interaction",
    )
    with transaction.atomic():
        review = mirror_pending(Thread.objects.select_for_update().get(pk=thread.pk), None, pending)
    assert review is not None
    return review


def user_for(role: str, world: World) -> User | None:
    """The user ``role`` signs in as (None: not signed in)."""
    if role in (ANONYMOUS, OPENER_KEY):
        return None
    if role == OPENER:
        return world.opener
    if role == SUPERUSER:
        return User.objects.create_superuser("root", password=None)
    user = User.objects.create_user(role, is_staff=True)
    codenames = {
        LOOKER: VIEW_PERMISSIONS,
        REVIEWER: [*VIEW_PERMISSIONS, "decide_review"],
        KEYS: KEY_PERMISSIONS,
        KEYS_FOR_OTHERS: [*KEY_PERMISSIONS, "add_apikey_for_others"],
    }
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label=APP, codename__in=codenames.get(role, []))
    )
    return user


# -- the cells -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One request: ``path`` and ``data`` may name ``{thread}``, ``{review}``, ``{pk}`` ...;
    ``expect`` maps a role to the status it gets (``LOGIN``: a redirect to the admin login)."""

    name: str
    route: str  # the URL pattern it exercises (for the completeness check)
    method: str
    path: str
    expect: dict[str, int | str]
    data: dict[str, Any] | None = None
    api: bool = False
    check: str = ""  # an extra check on the outcome, see ``check_outcome``


def admin_expect(
    looker: int,
    reviewer: int | None = None,
    superuser: int | None = None,
    nobody: int = 403,
    keys: int | None = None,
) -> dict[str, int | str]:
    """``keys``: what both key keepers get (by default what staff without permissions get: the
    app's other views are not theirs)."""
    reviewer = looker if reviewer is None else reviewer
    superuser = reviewer if superuser is None else superuser
    keys = nobody if keys is None else keys
    return {
        ANONYMOUS: LOGIN,
        OPENER: LOGIN,
        OPENER_KEY: LOGIN,  # an API key does not sign anybody in to the admin
        NOBODY: nobody,
        LOOKER: looker,
        REVIEWER: reviewer,
        SUPERUSER: superuser,
        KEYS: keys,
        KEYS_FOR_OTHERS: keys,
    }


def keys_expect(keepers: int, others: int = 403) -> dict[str, int | str]:
    """An API key view: ``keepers`` for superusers and both key keepers, ``others`` for staff
    without the key permissions."""
    return admin_expect(others, superuser=keepers, keys=keepers)


READ_ONLY_MODELS = ["thread", "run", "review", "decision", "delivery", "event"]


def admin_cases() -> list[Case]:
    cases: list[Case] = []
    for model in READ_ONLY_MODELS:
        base = f"{ADMIN}/{model}"
        obj = f"{base}/{{{model}}}"
        change_get = 302 if model == "review" else 200  # a review's change URL opens its screen
        cases += [
            Case(f"{model}:changelist", "", "GET", f"{base}/", admin_expect(200)),
            Case(f"{model}:add", "add/", "GET", f"{base}/add/", admin_expect(403)),
            Case(f"{model}:add-post", "add/", "POST", f"{base}/add/", admin_expect(403), {}),
            Case(f"{model}:history", "<path:object_id>/history/", "GET", f"{obj}/history/",
                 admin_expect(200)),
            Case(f"{model}:delete", "<path:object_id>/delete/", "GET", f"{obj}/delete/",
                 admin_expect(403)),
            Case(f"{model}:delete-post", "<path:object_id>/delete/", "POST", f"{obj}/delete/",
                 admin_expect(403), {"post": "yes"}, check="not_deleted"),
            Case(f"{model}:change", "<path:object_id>/change/", "GET", f"{obj}/change/",
                 admin_expect(change_get)),
            Case(f"{model}:change-post", "<path:object_id>/change/", "POST", f"{obj}/change/",
                 admin_expect(403), {"status": "hacked"}),
            Case(f"{model}:object", "<path:object_id>/", "GET", f"{obj}/",
                 admin_expect(302, nobody=302)),
        ]  # fmt: skip
    review = f"{ADMIN}/review"
    approve = {"{stamp}": "", "call-0-action": "approve"}
    selected = {"_selected_action": ["{review}"]}
    cases += [
        Case("review:metrics", "metrics/", "GET", f"{review}/metrics/", admin_expect(200)),
        Case("review:live", "live/", "GET", f"{review}/live/", admin_expect(200)),
        Case("review:next", "next/", "GET", f"{review}/next/", admin_expect(302)),
        Case("review:claim", "<path:object_id>/claim/", "POST", f"{review}/{{review}}/claim/",
             admin_expect(403, 200), {"action": "renew"}),
        Case("review:assign", "<path:object_id>/assign/", "POST", f"{review}/{{review}}/assign/",
             admin_expect(403, 403, 302), {"to": ""}),
        Case("review:screen", "<path:object_id>/review/", "GET", f"{review}/{{review}}/review/",
             admin_expect(200)),
        Case("review:decide", "<path:object_id>/review/", "POST", f"{review}/{{review}}/review/",
             admin_expect(403, 302), approve, check="decided_by_deciders"),
        Case("review:bulk-approve-page", "", "POST", f"{review}/",
             admin_expect(403, 200), {"action": "approve_selected", **selected},
             check="decided_by_nobody"),
        Case("review:bulk-approve", "", "POST", f"{review}/",
             admin_expect(403, 302), {"action": "approve_selected", "post": "yes", **selected},
             check="decided_by_deciders"),
        Case("review:bulk-reject-page", "", "POST", f"{review}/",
             admin_expect(403, 200), {"action": "reject_selected", **selected}),
        # A dataset export: ``export_dataset`` (here only superusers). The world's review is
        # pending, so the export itself is refused with a message (a redirect to the queue).
        Case("review:export-dataset-page", "", "POST", f"{review}/",
             admin_expect(403, superuser=200), {"action": "export_dataset", **selected}),
        Case("review:export-dataset", "", "POST", f"{review}/",
             admin_expect(403, superuser=302),
             {"action": "export_dataset", "post": "yes", "format": "jsonl", **selected}),
        Case("thread:sync", "<path:object_id>/sync/", "POST", f"{ADMIN}/thread/{{thread}}/sync/",
             admin_expect(403, 302), {}, check="synced_by_deciders"),
        Case("thread:sync-get", "<path:object_id>/sync/", "GET",
             f"{ADMIN}/thread/{{thread}}/sync/", admin_expect(405, nobody=405)),
        Case("thread:bulk-sync", "", "POST", f"{ADMIN}/thread/",
             admin_expect(403, 302), {"action": "sync_selected", "_selected_action": ["{thread}"]},
             check="synced_by_deciders"),
    ]  # fmt: skip
    # API keys: a plain ModelAdmin for superusers and holders of its own permissions. Creating a
    # key for somebody else (the opener) needs ``add_apikey_for_others``; one's own, ``add_apikey``.
    keys = f"{ADMIN}/apikey"
    key = f"{keys}/{{apikey}}"
    for_opener = admin_expect(403, superuser=200, keys=200)  # 200: the key page, or the refusal
    cases += [
        Case("apikey:changelist", "", "GET", f"{keys}/", keys_expect(200)),
        Case("apikey:add", "add/", "GET", f"{keys}/add/", keys_expect(200)),
        Case("apikey:add-post", "add/", "POST", f"{keys}/add/", for_opener,
             {"user": "{opener}", "name": "New key"}, check="key_created_for_the_opener"),
        Case("apikey:add-post-own", "add/", "POST", f"{keys}/add/", keys_expect(200),
             {"user": "{caller}", "name": "New key"}, check="own_key_created"),
        Case("apikey:history", "<path:object_id>/history/", "GET", f"{key}/history/",
             keys_expect(200)),
        Case("apikey:change", "<path:object_id>/change/", "GET", f"{key}/change/",
             keys_expect(200)),
        Case("apikey:change-post", "<path:object_id>/change/", "POST", f"{key}/change/",
             keys_expect(302), {"name": "Renamed"}),
        Case("apikey:revoke", "", "POST", f"{keys}/", keys_expect(302),
             {"action": "revoke", "_selected_action": ["{apikey}"]},
             check="revoked_by_key_keepers"),
        Case("apikey:delete", "<path:object_id>/delete/", "GET", f"{key}/delete/",
             keys_expect(200)),
        Case("apikey:delete-post", "<path:object_id>/delete/", "POST", f"{key}/delete/",
             keys_expect(302), {"post": "yes"}, check="deleted_by_key_keepers"),
        Case("apikey:object", "<path:object_id>/", "GET", f"{key}/",
             admin_expect(302, nobody=302)),
    ]  # fmt: skip
    cases += governance_cases()
    return cases


def governance_cases() -> list[Case]:
    """Policy rules: a plain ModelAdmin for holders of the ``*_policy`` permissions (here only
    superusers). The notification outbox: read-only, for ``view_notification``. Notification
    preferences: every staff member their own, a superuser anyone's; nobody deletes one."""
    cases: list[Case] = []
    rules = f"{ADMIN}/policy"
    rule = f"{rules}/{{policy}}"
    only_root = admin_expect(403, superuser=200)
    cases += [
        Case("policy:changelist", "", "GET", f"{rules}/", only_root),
        Case("policy:add", "add/", "GET", f"{rules}/add/", only_root),
        Case("policy:add-post", "add/", "POST", f"{rules}/add/", only_root, {}),
        Case("policy:dry-run", "add/", "POST", f"{rules}/add/", only_root,
             {"_dry_run": "1", "name": "x", "position": "0", "action": "review",
              "approvals": "1", "priority": "0", "conditions": "[]"}),
        Case("policy:history", "<path:object_id>/history/", "GET", f"{rule}/history/", only_root),
        Case("policy:delete", "<path:object_id>/delete/", "GET", f"{rule}/delete/", only_root),
        Case("policy:delete-post", "<path:object_id>/delete/", "POST", f"{rule}/delete/",
             admin_expect(403, superuser=302), {"post": "yes"}),
        Case("policy:change", "<path:object_id>/change/", "GET", f"{rule}/change/", only_root),
        Case("policy:change-post", "<path:object_id>/change/", "POST", f"{rule}/change/",
             only_root, {}),
        Case("policy:object", "<path:object_id>/", "GET", f"{rule}/",
             admin_expect(302, nobody=302)),
        # Shadow rules: a rule's verdicts and agreement, and the replay of a draft rule set.
        Case("policy:agreement", "<path:object_id>/agreement/", "GET", f"{rule}/agreement/",
             only_root),
        Case("policy:replay", "replay/", "GET", f"{rules}/replay/", only_root),
        Case("policy:replay-post", "replay/", "POST", f"{rules}/replay/", only_root,
             {"rules": "[]", "last": "10"}),
    ]  # fmt: skip
    outbox = f"{ADMIN}/notification"
    sent = f"{outbox}/{{notification}}"
    cases += [
        Case("notification:changelist", "", "GET", f"{outbox}/", only_root),
        Case("notification:add", "add/", "GET", f"{outbox}/add/", admin_expect(403)),
        Case("notification:add-post", "add/", "POST", f"{outbox}/add/", admin_expect(403), {}),
        Case("notification:history", "<path:object_id>/history/", "GET", f"{sent}/history/",
             only_root),
        Case("notification:delete", "<path:object_id>/delete/", "GET", f"{sent}/delete/",
             admin_expect(403)),
        Case("notification:delete-post", "<path:object_id>/delete/", "POST", f"{sent}/delete/",
             admin_expect(403), {"post": "yes"}, check="not_deleted"),
        Case("notification:change", "<path:object_id>/change/", "GET", f"{sent}/change/",
             only_root),
        Case("notification:change-post", "<path:object_id>/change/", "POST", f"{sent}/change/",
             admin_expect(403), {"status": "sent"}),
        Case("notification:object", "<path:object_id>/", "GET", f"{sent}/",
             admin_expect(302, nobody=302)),
    ]  # fmt: skip
    prefs = f"{ADMIN}/notificationpreference"
    pref = f"{prefs}/{{notificationpreference}}"
    every_staff = admin_expect(200, nobody=200, keys=200)
    # Somebody else's preference is not in one's list: the admin says it does not exist (302).
    not_theirs = admin_expect(302, superuser=200, nobody=302, keys=302)
    cases += [
        Case("notificationpreference:changelist", "", "GET", f"{prefs}/", every_staff),
        Case("notificationpreference:add", "add/", "GET", f"{prefs}/add/", every_staff),
        Case("notificationpreference:add-post", "add/", "POST", f"{prefs}/add/",
             admin_expect(302, nobody=302, keys=302), {}),
        Case("notificationpreference:history", "<path:object_id>/history/", "GET",
             f"{pref}/history/", not_theirs),
        Case("notificationpreference:delete", "<path:object_id>/delete/", "GET",
             f"{pref}/delete/", admin_expect(403)),
        Case("notificationpreference:delete-post", "<path:object_id>/delete/", "POST",
             f"{pref}/delete/", admin_expect(403), {"post": "yes"}, check="not_deleted"),
        Case("notificationpreference:change", "<path:object_id>/change/", "GET",
             f"{pref}/change/", not_theirs),
        Case("notificationpreference:change-post", "<path:object_id>/change/", "POST",
             f"{pref}/change/", admin_expect(302, nobody=302, keys=302), {"enabled": "on"},
             check="preference_unchanged_but_by_root"),
        Case("notificationpreference:object", "<path:object_id>/", "GET", f"{pref}/",
             admin_expect(302, nobody=302)),
    ]  # fmt: skip
    # Stops: listed, looked at and added by holders of ``stop_assistants`` (here only
    # superusers); a record, so nobody changes or deletes one (resumed by the list's actions).
    stops, stop = f"{ADMIN}/stop", f"{ADMIN}/stop/{{stop}}"
    nobody_at_all = admin_expect(403, superuser=403)
    cases += [
        Case("stop:changelist", "", "GET", f"{stops}/", only_root),
        Case("stop:add", "add/", "GET", f"{stops}/add/", only_root),
        Case("stop:add-post", "add/", "POST", f"{stops}/add/", only_root, {}),
        Case("stop:history", "<path:object_id>/history/", "GET", f"{stop}/history/", only_root),
        Case("stop:delete", "<path:object_id>/delete/", "GET", f"{stop}/delete/", nobody_at_all),
        Case("stop:delete-post", "<path:object_id>/delete/", "POST", f"{stop}/delete/",
             nobody_at_all, {"post": "yes"}, check="not_deleted"),
        Case("stop:change", "<path:object_id>/change/", "GET", f"{stop}/change/", only_root),
        Case("stop:change-post", "<path:object_id>/change/", "POST", f"{stop}/change/",
             nobody_at_all, {"reason": "hacked"}),
        Case("stop:object", "<path:object_id>/", "GET", f"{stop}/",
             admin_expect(302, nobody=302)),
    ]  # fmt: skip
    # Grants: listed, looked at and revoked by holders of ``view_grant`` / ``grant_approval``
    # (here only superusers); records, so nobody adds, changes or deletes one here.
    grants, grant = f"{ADMIN}/grant", f"{ADMIN}/grant/{{grant}}"
    cases += [
        Case("grant:changelist", "", "GET", f"{grants}/", only_root),
        Case("grant:revoke", "", "POST", f"{grants}/", admin_expect(403, superuser=302),
             {"action": "revoke_selected", "_selected_action": ["{grant}"]}),
        Case("grant:add", "add/", "GET", f"{grants}/add/", nobody_at_all),
        Case("grant:history", "<path:object_id>/history/", "GET", f"{grant}/history/",
             only_root),
        Case("grant:delete", "<path:object_id>/delete/", "GET", f"{grant}/delete/",
             nobody_at_all),
        Case("grant:delete-post", "<path:object_id>/delete/", "POST", f"{grant}/delete/",
             nobody_at_all, {"post": "yes"}, check="not_deleted"),
        Case("grant:change", "<path:object_id>/change/", "GET", f"{grant}/change/", only_root),
        Case("grant:change-post", "<path:object_id>/change/", "POST", f"{grant}/change/",
             nobody_at_all, {"tool": "anything"}),
        Case("grant:object", "<path:object_id>/", "GET", f"{grant}/",
             admin_expect(302, nobody=302)),
    ]  # fmt: skip
    # Slack users: a link lets a Slack account decide as the Django user, so superusers only.
    links, link = f"{ADMIN}/slackuser", f"{ADMIN}/slackuser/{{slackuser}}"
    cases += [
        Case("slackuser:changelist", "", "GET", f"{links}/", only_root),
        Case("slackuser:add", "add/", "GET", f"{links}/add/", only_root),
        Case("slackuser:add-post", "add/", "POST", f"{links}/add/", only_root, {}),
        Case("slackuser:history", "<path:object_id>/history/", "GET", f"{link}/history/",
             only_root),
        Case("slackuser:delete", "<path:object_id>/delete/", "GET", f"{link}/delete/",
             only_root),
        Case("slackuser:delete-post", "<path:object_id>/delete/", "POST", f"{link}/delete/",
             admin_expect(403, superuser=302), {"post": "yes"}),
        Case("slackuser:change", "<path:object_id>/change/", "GET", f"{link}/change/",
             only_root),
        Case("slackuser:change-post", "<path:object_id>/change/", "POST", f"{link}/change/",
             only_root, {}),
        Case("slackuser:object", "<path:object_id>/", "GET", f"{link}/",
             admin_expect(302, nobody=302)),
    ]  # fmt: skip
    # A reveal of a review's redacted values: ``reveal_redacted`` (here only superusers).
    cases += [
        Case("review:reveal", "<path:object_id>/reveal/", "POST",
             f"{ADMIN}/review/{{review}}/reveal/", admin_expect(403, superuser=302), {}),
        Case("review:reveal-get", "<path:object_id>/reveal/", "GET",
             f"{ADMIN}/review/{{review}}/reveal/", admin_expect(403, superuser=403)),
    ]  # fmt: skip
    return cases


def api_expect(
    opener: int, readers: int, others: int, anonymous: int | str = 401
) -> dict[str, int | str]:
    return {
        ANONYMOUS: anonymous,
        OPENER: opener,
        OPENER_KEY: opener,
        LOOKER: readers,  # view_review
        REVIEWER: readers,
        SUPERUSER: readers,
        NOBODY: others,
        KEYS: others,  # no view_review: a key keeper reads no session of someone else
        KEYS_FOR_OTHERS: others,
    }


def api_cases() -> list[Case]:
    session = f"{API}/sessions/{{session}}"
    decide = {"decision": "answer", "answers": [{"questionId": "day", "optionIds": ["fri"]}]}
    return [
        Case("api:interactions", "sessions/<str:session_id>/interactions", "GET",
             f"{session}/interactions", api_expect(200, 200, 403), api=True),
        Case("api:interaction", "sessions/<str:session_id>/interactions/<str:interaction_id>",
             "GET", f"{session}/interactions/int-day", api_expect(200, 200, 403), api=True),
        Case("api:decide",
             "sessions/<str:session_id>/interactions/<str:interaction_id>/decide", "POST",
             f"{session}/interactions/int-day/decide", api_expect(200, 403, 403),
             {"{revision}": "", **decide}, api=True, check="decided_by_opener"),
        Case("api:events", "sessions/<str:session_id>/events", "GET", f"{session}/events",
             api_expect(200, 200, 403), api=True),
        # Reviews of every kind: tool calls need decide_review; an interaction, its opener
        # (view_review reads any review; anyone else does not learn that it exists).
        Case("api:reviews", "reviews", "GET", f"{API}/reviews",
             api_expect(200, 200, 200), api=True, check="listed_decidable"),
        Case("api:review", "reviews/<str:review_id>", "GET", f"{API}/reviews/{{review}}",
             api_expect(404, 200, 404), api=True),
        Case("api:review-question", "reviews/<str:review_id>", "GET",
             f"{API}/reviews/{{question}}", api_expect(200, 200, 404), api=True),
        Case("api:review-decide", "reviews/<str:review_id>/decide", "POST",
             f"{API}/reviews/{{review}}/decide",
             {**api_expect(404, 200, 404), LOOKER: 403},
             {"{revision}": "review", "tool_calls": [{"id": "call_1", "action": "approve"}]},
             api=True, check="decided_by_deciders"),
        Case("api:review-dismiss", "reviews/<str:review_id>/dismiss", "POST",
             f"{API}/reviews/{{review}}/dismiss",
             {**api_expect(404, 200, 404), LOOKER: 403}, {}, api=True),
        Case("api:review-decide-question", "reviews/<str:review_id>/decide", "POST",
             f"{API}/reviews/{{question}}/decide", api_expect(200, 403, 404),
             {"{revision}": "", **decide}, api=True, check="decided_by_opener"),
        # Grants: read with view_grant, revoked with grant_approval (here only superusers); a
        # caller with neither does not learn that one exists.
        Case("api:grants", "grants", "GET", f"{API}/grants",
             {**api_expect(403, 403, 403), SUPERUSER: 200}, api=True),
        Case("api:grant", "grants/<str:grant_id>", "GET", f"{API}/grants/{{grant}}",
             {**api_expect(404, 404, 404), SUPERUSER: 200}, api=True),
        Case("api:grant-revoke", "grants/<str:grant_id>/revoke", "POST",
             f"{API}/grants/{{grant}}/revoke", {**api_expect(404, 404, 404), SUPERUSER: 200},
             {}, api=True),
        Case("api:openapi", "openapi.json", "GET", f"{API}/openapi.json",
             api_expect(200, 200, 200, anonymous=200), api=True),
        Case("api:unknown", "^(?P<rest>.*)$", "GET", f"{API}/sessions", api_expect(404, 404, 404,
             anonymous=404), api=True),
    ]  # fmt: skip


CASES = admin_cases() + api_cases()


# -- doing a cell -----------------------------------------------------------------------------


def fill(value: Any, world: World, caller: User | None = None) -> Any:
    names = {
        **{model: str(pk) for model, pk in world.pks.items()},
        "session": str(world.thread.thread_id),
        "question": str(world.question.pk),
        "opener": str(world.opener.pk),
        "caller": str(caller.pk) if caller is not None else "",
    }
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, list):
        return [fill(item, world, caller) for item in value]
    return value


def request(
    case: Case,
    client: Client,
    headers: dict[str, str],
    world: World,
    caller: User | None = None,
) -> Any:
    """Do ``case`` with ``client``; ``caller`` is who it signed in as (``{caller}`` in data)."""
    path = fill(case.path, world)
    if case.method == "GET":
        return client.get(path, **headers)
    data = {key: fill(value, world, caller) for key, value in (case.data or {}).items()}
    if case.api:
        marker = data.pop("{revision}", None)
        if marker is not None:
            shown = world.tool_review if marker == "review" else world.question
            data = {"revision": shown.revision, "digest": shown.digest, **data}
        return client.post(path, json.dumps(data), content_type="application/json", **headers)
    if data.pop("{stamp}", None) is not None:
        data = {**{k: str(v) for k, v in stamp(world.tool_review).items()}, **data}
    return client.post(path, data, **headers)


def outcome(response: Any) -> int | str:
    if response.status_code == 302 and response["Location"].startswith(LOGIN):
        return LOGIN
    return int(response.status_code)


API_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found"}


def check_outcome(
    case: Case, role: str, response: Any, world: World, caller: User | None = None
) -> None:
    expected = case.expect[role]
    if case.api and isinstance(expected, int) and expected >= 400:
        assert_error(response, expected, API_CODES[expected])
    if case.check == "decided_by_deciders":
        decided = Decision.objects.filter(review=world.tool_review).exists()
        assert decided == (role in DECIDERS), (case.name, role, decided)
    elif case.check == "decided_by_nobody":
        assert not Decision.objects.filter(review=world.tool_review).exists(), (case.name, role)
    elif case.check == "decided_by_opener":
        decided = Decision.objects.filter(review=world.question).exists()
        assert decided == (role in {OPENER, OPENER_KEY}), (case.name, role, decided)
    elif case.check == "synced_by_deciders":
        world.tool_review.thread.refresh_from_db()
        synced = world.tool_review.thread.synced_at is not None
        assert synced == (role in DECIDERS), (case.name, role, synced)
    elif case.check == "key_created_for_the_opener":
        created = ApiKey.objects.filter(name="New key", user=world.opener).exists()
        assert created == (role in {SUPERUSER, KEYS_FOR_OTHERS}), (case.name, role, created)
        audited = Event.objects.filter(verb="api_key_created", data__name="New key").exists()
        assert audited == created, (case.name, role, audited)
    elif case.check == "own_key_created":
        created = ApiKey.objects.filter(name="New key", user=caller).exists()
        assert created == (role in KEY_KEEPERS), (case.name, role, created)
    elif case.check == "revoked_by_key_keepers":
        world.api_key.refresh_from_db()
        revoked = world.api_key.revoked_at is not None
        assert revoked == (role in KEY_KEEPERS), (case.name, role, revoked)
        audited = Event.objects.filter(verb="api_key_revoked", data__apiKey=world.api_key.pk)
        assert audited.exists() == revoked, (case.name, role)
    elif case.check == "deleted_by_key_keepers":
        deleted = not ApiKey.objects.filter(pk=world.api_key.pk).exists()
        assert deleted == (role in KEY_KEEPERS), (case.name, role, deleted)
        audited = Event.objects.filter(verb="api_key_deleted", data__apiKey=world.api_key.pk)
        assert audited.exists() == deleted, (case.name, role)
    elif case.check == "preference_unchanged_but_by_root":
        enabled = NotificationPreference.objects.get(pk=world.pks["notificationpreference"]).enabled
        assert enabled == (role == SUPERUSER), (case.name, role, enabled)
    elif case.check == "not_deleted":
        model = apps.get_model(APP, case.name.partition(":")[0])
        assert model.objects.filter(pk=world.pks[model._meta.model_name]).exists(), case.name
    elif case.check == "listed_decidable" and response.status_code == 200:
        listed = {item["id"] for item in response.json()["items"]}
        expected = {
            OPENER: {world.question.pk},
            OPENER_KEY: {world.question.pk},
            REVIEWER: {world.tool_review.pk},
            SUPERUSER: {world.tool_review.pk},  # interactions: over the API, their opener only
        }.get(role, set())
        assert listed == expected, (case.name, role, listed)


@pytest.fixture
def world(fake: FakeAssistant) -> World:
    return build_world()


@pytest.fixture
def fake() -> Iterator[FakeAssistant]:
    with fake_assistants() as fake:
        yield fake


def observe(case: Case, world: World, users: dict[str, User | None]) -> dict[str, Any]:
    """Each role's outcome of ``case`` (``LOGIN``, a status, or the failed check), each in a
    savepoint rolled back afterwards: one role's decision does not make the next one stale."""
    row: dict[str, Any] = {}
    for role in ROLES:
        savepoint = transaction.savepoint()
        try:
            client = Client()
            user = users[role]
            if user is not None:
                client.force_login(user)
            headers = {"HTTP_AUTHORIZATION": f"Bearer {world.key}"} if role == OPENER_KEY else {}
            response = request(case, client, headers, world, user)
            row[role] = outcome(response)
            if row[role] == case.expect[role]:
                try:
                    check_outcome(case, role, response, world, user)
                except AssertionError as error:
                    row[role] = f"{row[role]} but {error}"
        finally:
            transaction.savepoint_rollback(savepoint)
    return row


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_permission_matrix(case: Case, world: World) -> None:
    users = {role: user_for(role, world) for role in ROLES}
    row = observe(case, world, users)
    print(
        f"\nROW {case.method:4} {case.name:26}", " ".join(f"{role}={row[role]}" for role in ROLES)
    )
    assert 500 not in row.values(), row
    wrong = {role: got for role, got in row.items() if got != case.expect[role]}
    assert not wrong, f"{case.method} {case.name}: got {wrong}, expected {case.expect}"


# -- the matrix covers every view -------------------------------------------------------------


def admin_routes() -> set[tuple[str, str]]:
    routes = set()
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != APP:
            continue
        for pattern in model_admin.get_urls():
            assert isinstance(pattern, URLPattern)
            routes.add((model._meta.model_name, str(pattern.pattern)))
    return routes


def test_the_matrix_covers_every_admin_view_and_api_endpoint() -> None:
    covered = {(c.name.partition(":")[0], c.route) for c in CASES if not c.api}
    assert admin_routes() == covered
    api_routes = {str(pattern.pattern) for pattern in api_urls.urlpatterns}
    assert api_routes == {c.route for c in CASES if c.api}
    assert all(set(case.expect) == set(ROLES) for case in CASES)

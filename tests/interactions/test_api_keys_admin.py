"""API keys in the admin: created for a user, shown once, stored hashed, revocable."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from nitro_assistants.models import ApiKey, Event
from tests.interactions.conftest import assert_error

pytestmark = pytest.mark.django_db


def test_a_key_is_shown_once_stored_hashed_and_revocable(
    admin_client: Client, opener: Any, thread: Any, fake: Any
) -> None:
    response = admin_client.post(
        "/admin/nitro_assistants/apikey/add/", {"user": opener.pk, "name": "CRM"}
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    match = re.search(
        r'<code class="nitro-api-key"[^>]*>(nak_[^<]+)</code>', response.content.decode()
    )
    assert match is not None
    secret = match.group(1)
    key = ApiKey.objects.get(name="CRM")
    assert key.user == opener and key.matches(secret) and secret not in key.hashed_key
    # Never shown again: neither the change page nor the list shows it.
    for url in (
        f"/admin/nitro_assistants/apikey/{key.pk}/change/",
        "/admin/nitro_assistants/apikey/",
    ):
        page = admin_client.get(url).content.decode()
        assert secret not in page and f"nak_{key.prefix}_" in page

    client = Client()
    path = f"/nitro/api/sessions/{thread.thread_id}/interactions"
    assert client.get(path, HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    admin_client.post(
        "/admin/nitro_assistants/apikey/",
        {"action": "revoke", "_selected_action": [key.pk]},
    )
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert_error(client.get(path, HTTP_AUTHORIZATION=f"Bearer {secret}"), 401, "unauthorized")


# -- who may create a key for whom; the audit trail --------------------------------------------

ADD = "/admin/nitro_assistants/apikey/add/"
KEY_PERMISSIONS = [
    "nitro_assistants.view_apikey",
    "nitro_assistants.add_apikey",
    "nitro_assistants.change_apikey",
    "nitro_assistants.delete_apikey",
]


def staff(username: str, grant: Any, *perms: str) -> Any:
    from django.contrib.auth.models import User

    return grant(User.objects.create_user(username, password="pw", is_staff=True), *perms)


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def create(client: Client, user: Any, name: str = "CRM") -> Any:
    return client.post(ADD, {"user": user.pk, "name": name})


def created_events() -> list[Event]:
    return list(Event.objects.filter(verb="api_key_created").order_by("pk"))


def test_add_apikey_alone_creates_ones_own_keys_only(
    grant: Any, opener: Any, django_user_model: Any
) -> None:
    keeper = staff("kim", grant, *KEY_PERMISSIONS)
    root = django_user_model.objects.create_superuser("root", password="pw")
    client = signed_in(keeper)
    assert f'value="{keeper.pk}"' in client.get(ADD).content.decode()  # oneself by default

    for target in (opener, root):
        refused = create(client, target, name=f"for {target.username}")
        assert refused.status_code == 200
        assert "You may create an API key for yourself only" in refused.content.decode()
        assert "Can add API keys for other users" in refused.content.decode()
    assert not ApiKey.objects.exists() and not created_events()

    own = create(client, keeper)
    assert own.status_code == 200 and "nak_" in own.content.decode()
    key = ApiKey.objects.get()
    assert key.user == keeper
    (event,) = created_events()
    assert event.actor == keeper and event.thread is None
    assert event.data == {
        "apiKey": key.pk,
        "prefix": key.prefix,
        "name": "CRM",
        "userId": keeper.pk,
        "user": "kim",
    }


def test_add_apikey_for_others_cannot_reach_a_superuser_or_permissions_one_lacks(
    grant: Any, opener: Any, django_user_model: Any
) -> None:
    keeper = staff("kim", grant, *KEY_PERMISSIONS, "nitro_assistants.add_apikey_for_others")
    root = django_user_model.objects.create_superuser("root", password="pw")
    reader = staff("rita", grant, "nitro_assistants.view_review", "nitro_assistants.view_thread")
    client = signed_in(keeper)

    refused = create(client, root).content.decode()
    assert "root is a superuser: only a superuser may create a key that acts as one." in refused
    refused = create(client, reader).content.decode()
    assert (
        "rita holds permissions you do not (nitro_assistants.view_review, "
        "nitro_assistants.view_thread)" in refused
    )
    assert not ApiKey.objects.exists() and not created_events()

    assert create(client, opener).status_code == 200  # a user with nothing more than kim
    key = ApiKey.objects.get()
    assert key.user == opener
    (event,) = created_events()
    assert (event.actor, event.data["user"]) == (keeper, "olivia")


def test_a_superuser_creates_keys_for_anyone(
    admin_client: Client, admin_user: Any, django_user_model: Any
) -> None:
    other = django_user_model.objects.create_superuser("root2", password="pw")
    assert create(admin_client, other).status_code == 200
    assert ApiKey.objects.get().user == other
    assert created_events()[0].actor == admin_user


def test_the_service_refuses_too_whoever_calls_it(grant: Any, opener: Any) -> None:
    from django.core.exceptions import PermissionDenied

    from nitro_assistants.services.api_keys import create_api_key

    keeper = staff("kim", grant, *KEY_PERMISSIONS)
    with pytest.raises(PermissionDenied, match="for yourself only"):
        create_api_key(opener, "CRM", actor=keeper)
    with pytest.raises(PermissionDenied, match="Sign in"):
        create_api_key(opener, "CRM", actor=None)
    assert not ApiKey.objects.exists() and not created_events()
    key, secret = create_api_key(keeper, "mine", actor=keeper)
    assert key.matches(secret)


def test_revoking_and_deleting_keys_are_audit_events_without_the_secret(
    admin_client: Client, admin_user: Any, opener: Any
) -> None:
    live, secret = ApiKey.generate(opener, "live")
    revoked, _ = ApiKey.generate(opener, "old")
    revoked.revoke()
    admin_client.post(
        "/admin/nitro_assistants/apikey/",
        {"action": "revoke", "_selected_action": [live.pk, revoked.pk]},
    )
    events = list(Event.objects.filter(verb="api_key_revoked"))
    assert [(e.data["apiKey"], e.actor) for e in events] == [(live.pk, admin_user)]  # once

    admin_client.post(f"/admin/nitro_assistants/apikey/{live.pk}/delete/", {"post": "yes"})
    admin_client.post(
        "/admin/nitro_assistants/apikey/",
        {"action": "delete_selected", "_selected_action": [revoked.pk], "post": "yes"},
    )
    assert not ApiKey.objects.exists()
    deleted = {e.data["apiKey"]: e for e in Event.objects.filter(verb="api_key_deleted")}
    assert set(deleted) == {live.pk, revoked.pk}
    assert deleted[revoked.pk].data["revoked"] is True
    for event in Event.objects.all():
        assert secret not in str(event.data) and live.hashed_key not in str(event.data)

    # The trail is in the admin's event list, with no thread.
    page = admin_client.get("/admin/nitro_assistants/event/?verb=api_key_deleted")
    assert page.status_code == 200
    assert page.content.decode().count("api_key_deleted") >= 2
    event = deleted[live.pk]
    assert admin_client.get(f"/admin/nitro_assistants/event/{event.pk}/change/").status_code == 200

"""API keys in the admin: created for a user, shown once, stored hashed, revocable."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from nitro_assistants.models import ApiKey
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

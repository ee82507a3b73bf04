"""The transport reads proxies and the CA bundle from the environment once, when it is made."""

from __future__ import annotations

import pytest
import requests
import responses

from nitro_assistants.client.http import Transport

BASE = "http://assistants.test"


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_proxy_and_ca_bundle_of_the_environment_are_kept(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    clean_environment.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/company.pem")
    transport = Transport(BASE, "secret")
    assert transport.session.proxies["http"] == "http://proxy.internal:3128"
    assert transport.session.verify == "/etc/ssl/company.pem"
    assert transport.session.trust_env is False


def test_no_proxy_for_the_server_is_honoured(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    clean_environment.setenv("NO_PROXY", "assistants.test")
    assert "http" not in Transport(BASE, "secret").session.proxies


def test_requests_do_not_read_the_environment_again(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    transport = Transport(BASE, "secret")

    def read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the environment was read for a request")

    clean_environment.setattr(requests.utils, "get_environ_proxies", read)
    clean_environment.setattr(requests.sessions, "get_environ_proxies", read, raising=False)
    clean_environment.setattr(requests.sessions, "get_netrc_auth", read)
    with responses.RequestsMock() as mock:
        mock.get(f"{BASE}/ok", json={"ok": True})
        assert transport.request("GET", "/ok").json() == {"ok": True}
        assert mock.calls[0].request.headers["Authorization"] == "Bearer secret"


def test_a_session_of_the_callers_is_left_as_it_is(clean_environment: pytest.MonkeyPatch) -> None:
    session = requests.Session()
    Transport(BASE, "secret", session=session)
    assert session.trust_env is True

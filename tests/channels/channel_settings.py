"""The Slack settings of the channel tests, for the test process (tests/channels/conftest.py) and
the Celery worker it starts (tests/settings.py, from ``NITRO_TEST_SLACK_API_URL``). No Django."""

from __future__ import annotations

from typing import Any

TOKEN = "xoxb-tests"
SECRET = "slack-signing-secret-of-the-tests"
CHANNEL = "C0REVIEWS"
TEAM = "T0TEAM"


def slack_settings(api_url: str) -> dict[str, Any]:
    """What NITRO_ASSISTANTS gets for Slack: the app's credentials, its API at ``api_url`` and a
    notifier posting cards to CHANNEL, at once."""
    return {
        "SLACK": {
            "BOT_TOKEN": TOKEN,
            "SIGNING_SECRET": SECRET,
            "TEAM_ID": TEAM,
            "API_URL": api_url,
        },
        "NOTIFIERS": {
            "slack": {
                "BACKEND": "nitro_assistants.services.slack.SlackNotifier",
                "OPTIONS": {"channel": CHANNEL},
            }
        },
        "NOTIFY_BASE_URL": "https://reviews.example.com",
        "NOTIFY_DELAY": 0,
        "NOTIFY_INTERVAL": 0,
    }

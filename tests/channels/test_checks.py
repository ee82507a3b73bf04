"""System checks of Slack and e-mail replies: configured without their package or settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nitro_assistants.checks import check_settings

ROOT = Path(__file__).resolve().parents[2]
NOTIFIER = {
    "BACKEND": "nitro_assistants.services.slack.SlackNotifier",
    "OPTIONS": {"channel": "C1"},
}


def ids(settings: Any, **config: Any) -> list[str]:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, **config}
    return [message.id for message in check_settings()]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"SLACK": {"BOT_TOKEN": "xoxb-1"}, "NOTIFY_BASE_URL": "https://r.example.com"},
            ["nitro_assistants.E031"],
        ),
        (
            {"SLACK": {"BOT_TOKEN": "xoxb-1", "SIGNING_SECRET": "s"}},
            ["nitro_assistants.W030"],
        ),
        (
            {"NOTIFIERS": {"slack": NOTIFIER}, "NOTIFY_BASE_URL": "https://r.example.com"},
            ["nitro_assistants.E031"],
        ),
        (
            {
                "NOTIFIERS": {"slack": {**NOTIFIER, "OPTIONS": {"to": "everyone"}}},
                "SLACK": {"BOT_TOKEN": "xoxb-1", "SIGNING_SECRET": "s"},
                "NOTIFY_BASE_URL": "https://r.example.com",
            },
            ["nitro_assistants.E014"],
        ),
        ({"INBOUND_EMAIL": {"REPLY_ADDRESS": "reviews@example.com"}}, ["nitro_assistants.E033"]),
        ({"INBOUND_EMAIL": {"REPLY_ADDRESS": "reviews+{token}"}}, ["nitro_assistants.E033"]),
        ({"INBOUND_EMAIL": {"REPLY_ADDRESS": "reviews+{token}@reply.example.com"}}, []),
        (
            {
                "SLACK": {"BOT_TOKEN": "xoxb-1", "SIGNING_SECRET": "s"},
                "NOTIFY_BASE_URL": "https://r.example.com",
            },
            [],
        ),
    ],
)
def test_each_channel_misconfiguration_has_its_id(
    settings: Any, config: dict[str, Any], expected: list[str]
) -> None:
    assert ids(settings, **config) == expected


BLOCKED = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("slack_sdk", "anymail"):
            raise ImportError(name + " is not installed here")
sys.meta_path.insert(0, Block())
"""


def test_configured_without_the_extra_installed_is_an_error(tmp_path: Path) -> None:
    """A Python where slack_sdk and django-anymail cannot be imported: the app still loads (the
    extras are optional) and the check says which extra to install."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKED)
    code = (
        "import django, os\n"
        "import tests.celery_app\n"
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'tests.settings'\n"
        "from django.conf import settings\n"
        "django.setup()\n"
        "from django.test.utils import override_settings\n"
        "from nitro_assistants.checks import check_settings\n"
        "config = {**settings.NITRO_ASSISTANTS, 'NOTIFY_BASE_URL': 'https://r.example.com',\n"
        "    'SLACK': {'BOT_TOKEN': 'x', 'SIGNING_SECRET': 's'},\n"
        "    'INBOUND_EMAIL': {'REPLY_ADDRESS': 'r+{token}@example.com'}}\n"
        "with override_settings(NITRO_ASSISTANTS=config):\n"
        "    found = [(m.id, m.hint) for m in check_settings()]\n"
        "print(found)\n"
        "assert [i for i, _ in found] == ['nitro_assistants.E030', 'nitro_assistants.E032'], found\n"
        "assert 'nitro-assistants[slack]' in found[0][1]\n"
        "import nitro_assistants.tasks, nitro_assistants.receivers\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]

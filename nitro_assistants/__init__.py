"""Human review of LLM assistants in the Django admin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nitro_assistants.operations import operation as operation

if TYPE_CHECKING:
    from nitro_assistants.client.registry import Registry

__version__ = "0.1.0"


def assistants() -> Registry:
    """The registry of assistants configured in ``settings.NITRO_ASSISTANTS``.

    Read at call time, so ``override_settings`` applies. ``assistants()["key"]`` is an
    :class:`~nitro_assistants.client.Assistant` bound to that definition's ``assistant_id``.
    """
    # Imported here, not at the top: ``import nitro_assistants`` (which the Django-free client
    # does) must not import Django, and conf reads Django's settings.
    from nitro_assistants.client.registry import Registry
    from nitro_assistants.conf import app_settings

    return Registry(app_settings.client_config())

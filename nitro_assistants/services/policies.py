"""The former name of :mod:`nitro_assistants.services.policy_enforcement`, kept for code (and
docs) written before the rename (``services.policies.rules_changed()``): importing it gives that
very module, so its names and patches of them are the same."""

from __future__ import annotations

import sys

from nitro_assistants.services import policy_enforcement

sys.modules[__name__] = policy_enforcement

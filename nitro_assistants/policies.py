"""The former name of :mod:`nitro_assistants.policy_rules`, kept for code (and docs) written
before the rename: importing it gives that very module, so its names and patches of them are
the same."""

from __future__ import annotations

import sys

from nitro_assistants import policy_rules

sys.modules[__name__] = policy_rules

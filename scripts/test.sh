#!/usr/bin/env bash
# The test command: sets up what it needs (venv, dependencies, PostgreSQL, Redis, chromium),
# then lint, format check, type check and the whole test suite against the real services and
# a real LangGraph server, then the admin and API tests again on SQLite. Extra arguments go to
# pytest (and skip the SQLite pass).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NEEDS_SERVICES=1 NEEDS_BROWSER=1 bash scripts/setup.sh

echo "==> ruff check";        .venv/bin/ruff check .
echo "==> ruff format";       .venv/bin/ruff format --check .
echo "==> mypy";              .venv/bin/mypy nitro_assistants
echo "==> pytest (PostgreSQL)"; NITRO_TEST_DB=postgresql .venv/bin/pytest -p no:cacheprovider "$@"
# SQLite is the example site's embedded default: every admin page and API endpoint must work on
# it too, so the admin and API tests run a second time there (Celery as the demo runs it, in
# process). Skipped when pytest was given arguments: then the caller chose what to run.
if [ $# -eq 0 ]; then
  echo "==> pytest (SQLite): tests/admin tests/interactions"
  NITRO_TEST_DB=sqlite .venv/bin/pytest -p no:cacheprovider tests/admin tests/interactions
fi

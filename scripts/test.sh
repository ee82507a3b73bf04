#!/usr/bin/env bash
# The test command: sets up what it needs (venv, dependencies, PostgreSQL, Redis, chromium),
# then lint, format check, type check and the whole test suite against the real services and
# a real LangGraph server. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NEEDS_SERVICES=1 NEEDS_BROWSER=1 bash scripts/setup.sh

echo "==> ruff check";        .venv/bin/ruff check .
echo "==> ruff format";       .venv/bin/ruff format --check .
echo "==> mypy";              .venv/bin/mypy nitro_assistants
echo "==> pytest";            .venv/bin/pytest -p no:cacheprovider "$@"

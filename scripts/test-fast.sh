#!/usr/bin/env bash
# The contributor's loop (make test-fast): lint, format check, type check, then the client's tests
# and the admin and API tests on SQLite, without the browser (-m "not browser") and without the
# real LangGraph server (-m "not server"): about a minute on two cores, where make test
# (scripts/test.sh) takes a quarter of an hour. The server's tests are left out because they
# wait on its runs (two to three seconds each: 120 s for the client's alone, and xdist only adds
# a server per worker); the client's own tests against raw and faulty servers stay in. It needs
# Redis (started when it is not running: the broker and the live cache), not PostgreSQL or
# chromium. A first check, not the gate: PostgreSQL (row locks, the one-statement writes,
# prepared statements), the real server, the Celery worker and the browser run only in make test,
# which CI runs. Extra arguments go to pytest, e.g. `bash scripts/test-fast.sh -x -k decide`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NEEDS_SERVICES=redis bash scripts/setup.sh

echo "==> ruff check";        .venv/bin/ruff check .
echo "==> ruff format";       .venv/bin/ruff format --check .
echo "==> mypy";              .venv/bin/mypy nitro_assistants
echo "==> pytest (SQLite, no browser, no server): tests/client tests/admin tests/interactions tests/channels"
NITRO_TEST_DB=sqlite .venv/bin/pytest -p no:cacheprovider -m "not browser and not server" \
  tests/client tests/admin tests/interactions tests/channels "$@"

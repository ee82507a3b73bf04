#!/usr/bin/env bash
# The test command: sets up what it needs (venv, dependencies, PostgreSQL, Redis, chromium),
# then lint, format check, type check and the whole test suite against the real services and
# a real LangGraph server, again with PostgreSQL's prepared statements (the tests that use the
# database), then the admin and API tests again on SQLite. Extra arguments go to pytest (and
# skip the second and third passes). The contributor's loop is scripts/test-fast.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NEEDS_SERVICES=1 NEEDS_BROWSER=1 bash scripts/setup.sh

echo "==> ruff check";        .venv/bin/ruff check .
echo "==> ruff format";       .venv/bin/ruff format --check .
echo "==> mypy";              .venv/bin/mypy nitro_assistants
echo "==> pytest (PostgreSQL)"; NITRO_TEST_DB=postgresql .venv/bin/pytest -p no:cacheprovider "$@"
# PostgreSQL again with the statements prepared (server-side binding, NITRO_TEST_DB_PREPARED=1),
# as docs/django.md advises a host to run it: every statement of the services must take its
# parameters apart from its text (tests/core/test_prepared.py checks each pass is the way it
# says). Two processes (pytest-xdist), each with a test database of its own.
# Only the tests that may open the test database (--database-tests-only, tests/conftest.py: a
# django_db mark or a fixture built on db/transactional_db). That is pytest-django's own line,
# not a list of paths: every other test is refused a connection, so prepared statements cannot
# change its result (the client's HTTP tests, the docs, layers and checks tests); a new test
# lands on the right side by what it asks for. The browser tests (-m "not browser") are left to
# the first pass too: their pages' statements are the admin tests' ones, which run here.
if [ $# -eq 0 ]; then
  echo "==> pytest (PostgreSQL, statements prepared): the database tests, no browser"
  NITRO_TEST_DB=postgresql NITRO_TEST_DB_PREPARED=1 NITRO_TEST_DB_NAME=nitro_prepared \
    NITRO_TEST_QUEUE=nitro_tests_prepared \
    .venv/bin/pytest -p no:cacheprovider -n 2 --database-tests-only -m "not browser" tests
fi
# SQLite is the example site's embedded default: every admin page and API endpoint must work on
# it too, so the admin, API and channel (Slack, e-mail reply) tests run once more there (Celery as the demo runs it, in
# process). Skipped when pytest was given arguments: then the caller chose what to run.
if [ $# -eq 0 ]; then
  echo "==> pytest (SQLite): tests/admin tests/interactions tests/channels"
  NITRO_TEST_DB=sqlite .venv/bin/pytest -p no:cacheprovider tests/admin tests/interactions tests/channels
fi

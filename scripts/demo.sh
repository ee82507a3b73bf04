#!/usr/bin/env bash
# The demo: sets up the venv, then runs the example site (reviewsite) against a real local
# Assistants server (langgraph dev with the demo assistant), seeds conversations that wait on each
# kind of review, and prints the admin URL and login. Ctrl-C stops everything.
#   --check   do it all headless, then check in a real browser (chromium) that every admin page
#             the demo links renders with its stylesheet, decide a tool call and approve the plan.
# Without CELERY_BROKER_URL/REDIS_URL tasks run eagerly in the site; with one, a worker starts too.
# The variables it reads (WEB_PORT, LG_PORT, DEMO_PASSWORD, DATABASE_URL, CELERY_BROKER_URL,
# DEBUG) are in the README's table next to `make demo`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
CHECK=0
[ "${1:-}" = "--check" ] && CHECK=1

NEEDS_SERVICES=0 bash scripts/setup.sh
PY="$ROOT/.venv/bin/python"
VAR="$ROOT/var/demo"
rm -rf "$VAR" && mkdir -p "$VAR/langgraph"

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
LG_PORT=${LG_PORT:-$(free_port)}
WEB_PORT=${WEB_PORT:-8000}
if ! "$PY" -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', $WEB_PORT))" 2>/dev/null; then
  WEB_PORT=$(free_port)
fi
# The site's settings build the notifications' links from it (NOTIFY_BASE_URL, when not set).
export WEB_PORT

export DJANGO_SETTINGS_MODULE=reviewsite.settings
export DATABASE_URL=${DATABASE_URL:-sqlite:///$VAR/db.sqlite3}
export ASSISTANTS_URL="http://127.0.0.1:$LG_PORT"
export DEMO_OUTBOX="$VAR/outbox.jsonl"
# collectstatic writes here and WhiteNoise serves it, whatever DEBUG is (as under gunicorn).
export STATIC_ROOT="$VAR/static"
export LANGGRAPH_CLI_NO_ANALYTICS=1 LANGSMITH_TRACING=false LANGGRAPH_NO_VERSION_CHECK=true

# A PostgreSQL database named in DATABASE_URL must exist: say so before anything starts, where
# the connection pool would retry for 30 seconds and then report a timeout.
"$PY" - <<'PY' || exit 1
import os, sys

import environ

config = environ.Env.db_url_config(os.environ["DATABASE_URL"])
if "postgresql" in config["ENGINE"]:
    import psycopg

    try:
        psycopg.connect(
            dbname=config["NAME"],
            user=config.get("USER") or None,
            password=config.get("PASSWORD") or None,
            host=config.get("HOST") or None,
            port=config.get("PORT") or None,
            connect_timeout=10,
        ).close()
    except psycopg.OperationalError as exc:
        sys.exit(
            f"DATABASE_URL: cannot connect to database {config['NAME']!r}: {exc}".strip()
            + f"\nCreate it first (e.g. createdb {config['NAME']}) or fix the URL."
        )
PY

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat > "$VAR/langgraph/langgraph.json" <<JSON
{"graphs": {"virtual-confirmation": "$ROOT/reviewsite/agent/graph.py:graph"},
 "dependencies": ["$ROOT"],
 "webhooks": {"url": {"disable_loopback": false, "require_https": false}}}
JSON
echo "==> starting the demo assistant (langgraph dev) on port $LG_PORT"
(cd "$VAR/langgraph" && exec setsid "$ROOT/.venv/bin/langgraph" dev --no-browser --no-reload \
  --host 127.0.0.1 --port "$LG_PORT" --config langgraph.json --n-jobs-per-worker 10 \
  > "$VAR/langgraph.log" 2>&1) &
PIDS+=($!)
for i in $(seq 1 120); do
  curl -fs "http://127.0.0.1:$LG_PORT/ok" >/dev/null 2>&1 && break
  if [ "$i" = 120 ]; then echo "the assistant server did not start; see $VAR/langgraph.log" >&2; tail -20 "$VAR/langgraph.log" >&2; exit 1; fi
  sleep 0.5
done

echo "==> migrating and collecting the static files"
"$PY" manage.py migrate --noinput -v 0
"$PY" manage.py collectstatic --noinput -v 0

# The worker starts before the seed: the seeded runs are its tasks, and the seed waits for them.
if [ -n "${CELERY_BROKER_URL:-${REDIS_URL:-}}" ]; then
  echo "==> starting a Celery worker and beat"
  setsid "$ROOT/.venv/bin/celery" -A reviewsite worker -B -s "$VAR/celerybeat-schedule" -l warning \
    > "$VAR/worker.log" 2>&1 &
  PIDS+=($!)
fi

echo "==> seeding"
"$PY" manage.py seed_demo --password="${DEMO_PASSWORD:-}" | tee "$VAR/seed.txt"
LOGIN=$(grep '^login:' "$VAR/seed.txt" | cut -d' ' -f2-)
USERNAME=${LOGIN%% / *}
PASSWORD=${LOGIN##* / }

echo "==> starting the site on port $WEB_PORT"
setsid "$PY" manage.py runserver "127.0.0.1:$WEB_PORT" --noreload > "$VAR/web.log" 2>&1 &
PIDS+=($!)
for i in $(seq 1 60); do
  curl -fs -o /dev/null "http://127.0.0.1:$WEB_PORT/admin/login/" && break
  if [ "$i" = 60 ]; then echo "the site did not start; see $VAR/web.log" >&2; tail -20 "$VAR/web.log" >&2; exit 1; fi
  sleep 0.5
done

cat <<TXT

  Review queue:  http://127.0.0.1:$WEB_PORT/admin/nitro_assistants/review/
  SMS outbox:    http://127.0.0.1:$WEB_PORT/outbox/
  Login:         $USERNAME / $PASSWORD
  Assistant:     $ASSISTANTS_URL (logs in $VAR)

TXT

if [ "$CHECK" = 1 ]; then
  "$PY" manage.py demo_check --url "http://127.0.0.1:$WEB_PORT" --username="$USERNAME" \
    --password="$PASSWORD" --screenshots "$VAR/screenshots"
  exit $?
fi
echo "Press Ctrl-C to stop."
wait

#!/usr/bin/env bash
# A throwaway PostgreSQL server on 127.0.0.1 for the multi-worker Optuna test (tests/tuning).
#
#   source .ci/postgres.sh    # exports DAMCHA_TS_TEST_POSTGRES_URL; the server stops when the
#                             # sourcing shell exits (EXIT trap), or call damcha_ts_stop_postgres
#   bash .ci/postgres.sh      # starts one and prints the export line; it keeps running
#
# Installs PostgreSQL with apt-get when no server binaries are found. The cluster lives in a fresh
# temporary folder, listens on a free port of 127.0.0.1 only, trusts local connections, and holds
# one database, damcha_test. As root, the server runs as the `postgres` user (or `nobody`),
# because PostgreSQL refuses to run as root. Does nothing when DAMCHA_TS_TEST_POSTGRES_URL is set.
# Safe to source under `set -u`; it never exits the sourcing shell, it returns 1 on failure.

damcha_ts_pg_bindir() {
  local candidate
  for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ]; then
      echo "$candidate"
      return 0
    fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v initdb)")"
    return 0
  fi
  return 1
}

damcha_ts_stop_postgres() {
  local dir="${DAMCHA_TS_TEST_POSTGRES_DIR:-}"
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  ${DAMCHA_TS_PG_AS:-} "$DAMCHA_TS_PG_BINDIR/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1
  rm -rf "$dir"
  unset DAMCHA_TS_TEST_POSTGRES_URL DAMCHA_TS_TEST_POSTGRES_DIR
}

damcha_ts_start_postgres() {
  if [ -n "${DAMCHA_TS_TEST_POSTGRES_URL:-}" ]; then
    echo "postgres.sh: using DAMCHA_TS_TEST_POSTGRES_URL from the environment" >&2
    return 0
  fi
  local bindir dir port user
  if ! bindir=$(damcha_ts_pg_bindir); then
    echo "postgres.sh: no PostgreSQL binaries; installing them with apt-get" >&2
    apt-get update -qq >&2 || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2 || return 1
    bindir=$(damcha_ts_pg_bindir) || { echo "postgres.sh: initdb not found after install" >&2; return 1; }
  fi
  dir=$(mktemp -d /tmp/damcha_ts_pg.XXXXXX) || return 1
  DAMCHA_TS_PG_AS=""
  if [ "$(id -u)" = 0 ]; then
    if id postgres >/dev/null 2>&1; then user=postgres; else user=nobody; fi
    chown "$user" "$dir" || return 1
    DAMCHA_TS_PG_AS="runuser -u $user --"
  fi
  DAMCHA_TS_PG_BINDIR="$bindir"
  export DAMCHA_TS_TEST_POSTGRES_DIR="$dir"
  if ! $DAMCHA_TS_PG_AS "$bindir/initdb" -D "$dir/data" -U damcha --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    return 1
  fi
  # A free port: bind to 0 and read what the kernel chose (then release it for the server).
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') || return 1
  if ! $DAMCHA_TS_PG_AS "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start >/dev/null; then
    cat "$dir/server.log" >&2
    return 1
  fi
  $DAMCHA_TS_PG_AS "$bindir/createdb" -h 127.0.0.1 -p "$port" -U damcha damcha_test || return 1
  export DAMCHA_TS_TEST_POSTGRES_URL="postgresql+psycopg2://damcha@127.0.0.1:$port/damcha_test"
  echo "postgres.sh: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $DAMCHA_TS_TEST_POSTGRES_URL" >&2
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  # Sourced: start, and stop at the end of the sourcing shell unless it already has an EXIT trap.
  damcha_ts_start_postgres || return 1
  if [ -n "${DAMCHA_TS_TEST_POSTGRES_DIR:-}" ]; then
    if [ -z "$(trap -p EXIT)" ]; then
      trap damcha_ts_stop_postgres EXIT
    else
      echo "postgres.sh: an EXIT trap exists; call damcha_ts_stop_postgres yourself" >&2
    fi
  fi
else
  damcha_ts_start_postgres || exit 1
  echo "export DAMCHA_TS_TEST_POSTGRES_URL=$DAMCHA_TS_TEST_POSTGRES_URL"
  echo "# stop: ${DAMCHA_TS_PG_AS} $DAMCHA_TS_PG_BINDIR/pg_ctl -D $DAMCHA_TS_TEST_POSTGRES_DIR/data stop"
fi

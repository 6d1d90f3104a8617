#!/usr/bin/env bash
# start.sh: run a real OpenStack Placement (openstack-placement, pinned in requirements.txt and
# constraints.txt beside this script) on 127.0.0.1 for rtrack's tests.
#
#   scripts/placement/start.sh [--fresh] [--owner-pid PID] [--keystone AUTH_URL]
#                              [--db sqlite|mariadb] [--workers N] DIR [PORT|auto]
#
# - The venv lives in target/placement-venv (override: PLACEMENT_VENV) and is rebuilt only when
#   the interpreter or the pin files change (a stamp file holds their hash).
# - DIR holds etc/placement.conf, data/placement.sqlite, logs/ (placement.log has one line per
#   request: tests count requests from it; access.log has each request's time, method, path,
#   status and duration in microseconds: the fleet benchmark reads it) and run/ (pid, port, url).
# - SQLite and noauth2 (X-Auth-Token "admin"); gunicorn with one worker and one thread, because
#   SQLite under concurrent writers answers 500 "database is locked" instead of waiting.
# - --db mariadb: Placement on MariaDB as production runs it (through PyMySQL), with 4 gunicorn
#   workers (one thread each) unless --workers says otherwise. The script runs its own mariadbd
#   (Debian: apt-get install mariadb-server mariadb-client) on a data directory DIR/mariadb made
#   at the first start, listening only on the unix socket DIR/run/mariadb.sock (no TCP port), as
#   the invoking user, without grant tables (nobody else can reach the socket's directory). It
#   never touches a system MariaDB: no option files are read (--no-defaults). stop.sh and the
#   --owner-pid watcher stop it with the server; its pid is in DIR/run/mariadb.pid, its log in
#   logs/mariadb.log. InnoDB writes its log at each commit but flushes it to disk once a second
#   (innodb_flush_log_at_trx_commit=2): the tests share a disk, and a crash of the test machine
#   loses only test data.
# - --keystone AUTH_URL (e.g. what scripts/keystone/start.sh printed) puts keystonemiddleware in
#   front instead of noauth2: it validates tokens as user "placement" of project "service" (domain
#   Default), password from PLACEMENT_KEYSTONE_PASSWORD (scripts/keystone/admin.py setup prints
#   it). No token cache, so a revoked token is refused at its next request; no memcached.
# - Prints only the URL on stdout; everything else goes to stderr.
# - Idempotent: when DIR's server runs already, prints its URL (a different PORT, or an auth mode
#   or Keystone URL other than the running server's, is an error). A pid file left by a crashed
#   run is detected and removed.
# - --fresh empties the database first (the server must be stopped).
# - --owner-pid PID: a watcher stops the server once PID has exited, so a test binary that
#   panics, aborts or is killed does not leave a server behind.
#
# Needs bash, python3 >= 3.11 with the venv module (Debian: apt-get install python3-venv),
# setsid and flock (util-linux), and PyPI for the first install.
set -Eeuo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
say() { printf 'placement/start: %s\n' "$*" >&2; }
fail() { printf 'placement/start: error: %s\n' "$*" >&2; exit 1; }

fresh=0
owner=
keystone=
db=sqlite
workers=
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --fresh) fresh=1 ;;
        --owner-pid) shift; owner=${1:-} ;;
        --keystone) shift; keystone=${1:-} ;;
        --db) shift; db=${1:-} ;;
        --workers) shift; workers=${1:-} ;;
        -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
        -*) fail "unknown option $1" ;;
        *) args+=("$1") ;;
    esac
    shift
done
[ ${#args[@]} -ge 1 ] && [ ${#args[@]} -le 2 ] \
    || fail "usage: start.sh [--fresh] [--owner-pid PID] [--keystone AUTH_URL] [--db sqlite|mariadb] [--workers N] DIR [PORT|auto]"
case "$db" in
    sqlite) workers=${workers:-1} ;;
    mariadb) workers=${workers:-4} ;;
    *) fail "--db needs 'sqlite' or 'mariadb', got '$db'" ;;
esac
case "$workers" in
    ''|*[!0-9]*|0) fail "--workers needs a positive number, got '$workers'" ;;
esac
[ "$db" = mariadb ] || [ "$workers" = 1 ] \
    || fail "--workers $workers needs --db mariadb: SQLite answers 500 'database is locked' to concurrent writers"
port=${args[1]:-auto}
case "$port" in
    auto|0) port=auto ;;
    *[!0-9]*) fail "PORT must be a number or 'auto', got '$port'" ;;
esac
case "$owner" in *[!0-9]*) fail "--owner-pid needs a number, got '$owner'" ;; esac
auth=noauth2
if [ -n "$keystone" ]; then
    case "$keystone" in
        http://*|https://*) ;;
        *) fail "--keystone needs an http(s) URL, got '$keystone'" ;;
    esac
    # It goes into an oslo.config file, as does the password.
    case "$keystone" in *[[:space:]\$%\"\'\\\#\;]*) fail "--keystone URL '$keystone' must be plain" ;; esac
    [ -n "${PLACEMENT_KEYSTONE_PASSWORD:-}" ] \
        || fail "--keystone needs the placement user's password in PLACEMENT_KEYSTONE_PASSWORD"
    case "$PLACEMENT_KEYSTONE_PASSWORD" in *[![:alnum:]._~+/=-]*)
        fail "PLACEMENT_KEYSTONE_PASSWORD must use only letters, digits and ._~+/=-" ;; esac
    auth="keystone $keystone"
fi

for tool in setsid flock sha256sum; do
    command -v "$tool" >/dev/null || fail "'$tool' not found (Debian: apt-get install util-linux coreutils)"
done
PY=${PLACEMENT_PYTHON:-python3}
command -v "$PY" >/dev/null || fail "'$PY' not found: install python3 >= 3.11 with its venv module (Debian: apt-get install python3 python3-venv)"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || fail "$("$PY" -V 2>&1) is too old: openstack-placement needs Python >= 3.11"
"$PY" -c 'import venv, ensurepip' 2>/dev/null \
    || fail "$PY has no venv/ensurepip module (Debian: apt-get install python3-venv)"

mkdir -p -- "${args[0]}"
DIR=$(cd -- "${args[0]}" && pwd -P)
# The path goes into an oslo.config file and a SQLAlchemy URL.
case "$DIR" in *[[:space:]\$%\"\'\\\#\;]*) fail "DIR '$DIR' must be a plain path" ;; esac
mkdir -p "$DIR/etc" "$DIR/data" "$DIR/logs" "$DIR/run"
PIDFILE=$DIR/run/placement.pid
GPIDFILE=$DIR/run/gunicorn.pid
MPIDFILE=$DIR/run/mariadb.pid
MSOCK=$DIR/run/mariadb.sock
# shellcheck source=../lib/gunicorn.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../lib/gunicorn.sh"

exec 9>"$DIR/run/lock"
flock -w 600 9 || fail "another start/stop holds $DIR/run/lock"

# GET / until it answers: prints "min max". Never through a proxy.
ready() {  # url timeout [pid]
    "$PY" - "$@" <<'PY'
import json, os, sys, time, urllib.request
url, limit = sys.argv[1], float(sys.argv[2])
pid = int(sys.argv[3]) if len(sys.argv) > 3 else None
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
end, last = time.monotonic() + limit, None
while True:
    if pid is not None and not os.path.exists("/proc/%d" % pid):
        sys.exit("server pid %d exited before answering" % pid)
    try:
        with opener.open(url + "/", timeout=2) as r:
            v = json.load(r)["versions"][0]
            print(v["min_version"], v["max_version"])
            sys.exit(0)
    except Exception as e:
        last = e
    if time.monotonic() > end:
        sys.exit("no answer from %s/ in %ss: %s" % (url, limit, last))
    time.sleep(0.1)
PY
}

if [ -f "$PIDFILE" ]; then
    old=$(cat "$PIDFILE" 2>/dev/null || true)
    if ours "$old"; then
        [ "$fresh" = 0 ] || fail "--fresh needs the server stopped first (pid $old): $HERE/stop.sh $DIR"
        oldport=$(cat "$DIR/run/port" 2>/dev/null || true)
        [ "$port" = auto ] || [ "$port" = "$oldport" ] \
            || fail "already running on port $oldport (pid $old), not $port"
        oldauth=$(cat "$DIR/run/auth" 2>/dev/null || echo noauth2)
        [ "$auth" = "$oldauth" ] || fail "already running with auth '$oldauth' (pid $old), not '$auth'"
        olddb=$(cat "$DIR/run/db" 2>/dev/null || echo "sqlite 1")
        [ "$db $workers" = "$olddb" ] || fail "already running with database and workers '$olddb' (pid $old), not '$db $workers'"
        [ "$db" = sqlite ] || mariadb_ours "$(cat "$MPIDFILE" 2>/dev/null || true)" \
            || fail "Placement (pid $old) runs but its mariadbd does not: stop it with $HERE/stop.sh $DIR, then start again"
        ready "http://127.0.0.1:$oldport" 30 >/dev/null || fail "pid $old runs but does not answer"
        watch_owner
        echo "http://127.0.0.1:$oldport"
        exit 0
    fi
    say "removing stale pid file (pid '$old' is not running a server for $DIR)"
    rm -f "$PIDFILE" "$GPIDFILE"
fi

# ---- venv (shared by every DIR; one installer at a time)
# shellcheck source=../lib/venv.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../lib/venv.sh"
venv_named placement "$DIR/logs/install.log" # sets VENV

# sqlite_template LOG: $VENV/placement-template.sqlite, an empty database synced by this venv's
# Placement (made once, under a lock; it goes when the venv is rebuilt).
sqlite_template() {
    local tpl=$VENV/placement-template.sqlite conf=$VENV/placement-template.conf
    exec 7>"$VENV/placement-template.lock"
    flock -w 300 7 || fail "another start holds $VENV/placement-template.lock"
    if [ ! -f "$tpl" ]; then
        rm -f -- "$tpl.new"
        printf '[placement_database]\nconnection = sqlite:///%s.new\n' "$tpl" >"$conf"
        "$VENV/bin/placement-manage" --config-file "$conf" db sync >>"$1" 2>&1 \
            || { tail -n 20 "$1" >&2; rm -f -- "$tpl.new"; fail "db sync of $tpl.new failed (log: $1)"; }
        mv -- "$tpl.new" "$tpl"
    fi
    flock -u 7
    exec 7>&-
}

# ---- MariaDB (--db mariadb): our own mariadbd on DIR/mariadb, unix socket only
if [ "$db" = mariadb ]; then
    for tool in mariadbd mariadb-install-db mariadb mariadb-admin; do
        command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] \
            || fail "'$tool' not found: --db mariadb needs MariaDB (Debian: apt-get install mariadb-server mariadb-client)"
    done
    MARIADBD=$(command -v mariadbd || echo /usr/sbin/mariadbd)
    [ ${#MSOCK} -lt 100 ] || fail "the socket path $MSOCK is too long for a unix socket; use a shorter DIR"
    oldm=$(cat "$MPIDFILE" 2>/dev/null || true)
    if ! mariadb_ours "$oldm"; then
        [ -z "$oldm" ] || say "removing stale mariadbd pid file (pid '$oldm' is not our mariadbd)"
        rm -f "$MPIDFILE" "$MSOCK"
        if [ ! -d "$DIR/mariadb/mysql" ]; then
            rm -rf -- "$DIR/mariadb"
            mariadb-install-db --no-defaults --datadir="$DIR/mariadb" --user="$(id -un)" \
                --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve \
                >>"$DIR/logs/mariadb-install.log" 2>&1 \
                || { tail -n 20 "$DIR/logs/mariadb-install.log" >&2; rm -rf -- "$DIR/mariadb"; fail "mariadb-install-db failed (log: $DIR/logs/mariadb-install.log)"; }
        fi
        (
            exec 8>&- 9>&-
            exec setsid "$MARIADBD" --no-defaults --user="$(id -un)" --datadir="$DIR/mariadb" \
                --socket="$MSOCK" --pid-file="$MPIDFILE" --skip-networking --skip-grant-tables \
                --skip-name-resolve --log-error="$DIR/logs/mariadb.log" --max-connections=500 \
                --innodb-buffer-pool-size=256M --innodb-flush-log-at-trx-commit=2 \
                --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci
        ) </dev/null >>"$DIR/logs/mariadb.out" 2>&1 &
        mpid=$!
        for _ in $(seq 1 300); do
            mariadb-admin --no-defaults --socket="$MSOCK" -u root ping >/dev/null 2>&1 && break
            kill -0 "$mpid" 2>/dev/null || { tail -n 20 "$DIR/logs/mariadb.log" >&2; fail "mariadbd exited at start (log: $DIR/logs/mariadb.log)"; }
            sleep 0.1
        done
        mariadb-admin --no-defaults --socket="$MSOCK" -u root ping >/dev/null 2>&1 \
            || { kill -TERM "$mpid" 2>/dev/null || true; tail -n 20 "$DIR/logs/mariadb.log" >&2; fail "mariadbd did not answer on $MSOCK in 30 s"; }
        # mariadbd writes its pid file itself; ours is the process we started.
        echo "$mpid" >"$MPIDFILE"
    fi
    if [ "$fresh" = 1 ]; then
        mariadb --no-defaults --socket="$MSOCK" -u root -e 'DROP DATABASE IF EXISTS placement' \
            || fail "cannot drop the placement database on $MSOCK"
    fi
    mariadb --no-defaults --socket="$MSOCK" -u root \
        -e 'CREATE DATABASE IF NOT EXISTS placement CHARACTER SET utf8mb4' \
        || fail "cannot create the placement database on $MSOCK"
    connection="mysql+pymysql://root@localhost/placement?unix_socket=$MSOCK&charset=utf8mb4"
else
    connection="sqlite:///$DIR/data/placement.sqlite"
fi

# ---- config and database
cat >"$DIR/etc/placement.conf" <<EOF
# Written by rtrack scripts/placement/start.sh; rewritten at every start.
[DEFAULT]
log_file = $DIR/logs/placement.log
use_stderr = false

[api]
auth_strategy = ${auth%% *}

[placement_database]
connection = $connection
EOF
if [ -n "$keystone" ]; then
    # No memcached_servers: keystonemiddleware then caches in-process, which token_cache_time = -1
    # turns off, so that every request is validated and a revoked token is refused at once.
    chmod 600 "$DIR/etc/placement.conf"
    cat >>"$DIR/etc/placement.conf" <<EOF

[keystone_authtoken]
www_authenticate_uri = $keystone
auth_url = $keystone
auth_type = password
project_name = service
project_domain_name = Default
username = placement
user_domain_name = Default
password = $PLACEMENT_KEYSTONE_PASSWORD
region_name = RegionOne
token_cache_time = -1
EOF
fi
if [ "$fresh" = 1 ]; then
    rm -f "$DIR/data/placement.sqlite" "$DIR/data/placement.sqlite-journal"
fi
if [ "$db" = sqlite ] && [ ! -f "$DIR/data/placement.sqlite" ]; then
    # A new SQLite database is a copy of one synced once per venv: `db sync` spends seconds
    # importing Placement, and the tests start dozens of servers.
    sqlite_template "$DIR/logs/db-sync.log"
    cp -- "$VENV/placement-template.sqlite" "$DIR/data/placement.sqlite.new"
    mv -- "$DIR/data/placement.sqlite.new" "$DIR/data/placement.sqlite"
else
    "$VENV/bin/placement-manage" --config-file "$DIR/etc/placement.conf" db sync \
        >>"$DIR/logs/db-sync.log" 2>&1 \
        || { tail -n 20 "$DIR/logs/db-sync.log" >&2; fail "db sync of $DIR's $db database failed (log: $DIR/logs/db-sync.log)"; }
fi

# ---- server
if [ "$port" = auto ]; then
    port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
url="http://127.0.0.1:$port"
(
    exec 8>&- 9>&-
    cd "$DIR"
    export OS_PLACEMENT_CONFIG_DIR="$DIR/etc"
    exec setsid "$VENV/bin/python" "$VENV/bin/gunicorn" --bind "127.0.0.1:$port" \
        --worker-class gthread --workers "$workers" --threads 1 --timeout 60 --graceful-timeout 3 \
        --pid "$GPIDFILE" --error-logfile "$DIR/logs/gunicorn.log" --capture-output \
        --access-logfile "$DIR/logs/access.log" \
        --access-logformat '%(t)s %(m)s %(U)s %(s)s %(D)s' \
        placement.wsgi.api:application
) </dev/null >>"$DIR/logs/server.out" 2>&1 &
pid=$!
echo "$pid" >"$PIDFILE"
if ! versions=$(ready "$url" 60 "$pid"); then
    tail -n 20 "$DIR/logs/gunicorn.log" >&2 || true
    kill -TERM -- "-$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    [ "$db" = sqlite ] || stop_mariadb
    fail "placement did not come up on $url"
fi
echo "$port" >"$DIR/run/port"
echo "$auth" >"$DIR/run/auth"
echo "$db $workers" >"$DIR/run/db"
echo "$url" >"$DIR/run/url"
watch_owner
say "up at $url (pid $pid, $db, $workers worker(s), microversions ${versions/ /..})"
echo "$url"

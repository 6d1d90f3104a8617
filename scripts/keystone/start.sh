#!/usr/bin/env bash
# start.sh: run a real OpenStack Keystone (keystone, pinned in requirements.txt and constraints.txt
# beside this script) on 127.0.0.1 for rtrack's tests.
#
#   scripts/keystone/start.sh [--fresh] [--owner-pid PID] [--token-expiration SECONDS] DIR [PORT|auto]
#
# - Prints only the identity API URL, http://127.0.0.1:PORT/v3 (the auth_url), on stdout;
#   everything else goes to stderr. Exit 0 when it answers, 1 on any failure.
# - The venv lives in target/keystone-venv (override: KEYSTONE_VENV) and is rebuilt only when
#   the interpreter or the pin files change (a stamp file holds their hash).
# - DIR holds etc/keystone.conf, etc/admin-password, data/keystone.sqlite, the fernet and
#   credential key repositories (keys/), logs/ (access.log has one line per request: tests can
#   count logins from it) and run/ (pid, port, url, token-expiration).
# - keystone-manage bootstrap at every start (idempotent): user "admin" (password from
#   KEYSTONE_ADMIN_PASSWORD, else the one kept in DIR/etc/admin-password, else a new random one,
#   always written back there) with role admin on project "admin" and on the system; roles
#   admin, manager, member, reader, service; region RegionOne; identity endpoints
#   public/internal/admin at http://127.0.0.1:PORT (unversioned: clients discover the version).
#   scripts/keystone/admin.py then adds the users and services of rtrack's tests.
# - --token-expiration SECONDS sets [token] expiration (default 3600; keystone accepts >= 0;
#   tests use e.g. 30 to exercise renewal). Below 120 s, keystoneauth finds every token of the
#   Placement's own user "about to expire", so each request to a --keystone Placement costs
#   three logins of that user on top of the validation.
# - SQLite; gunicorn with one worker and one thread (SQLite and concurrent writers do not mix).
# - Idempotent: when DIR's server runs already, prints its URL (a PORT or --token-expiration
#   other than the running server's is an error). A pid file left by a crashed run is detected
#   and removed. A restart picks a new port unless given one: a Placement started with
#   --keystone keeps the old URL, so restart with the same PORT.
# - --fresh empties the database and the key repositories first (the server must be stopped).
# - --owner-pid PID: a watcher stops the server once PID has exited.
#
# Needs bash, python3 >= 3.11 with the venv module (Debian: apt-get install python3-venv),
# setsid and flock (util-linux), and PyPI for the first install.
set -Eeuo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
say() { printf 'keystone/start: %s\n' "$*" >&2; }
fail() { printf 'keystone/start: error: %s\n' "$*" >&2; exit 1; }

fresh=0
owner=
expiration=
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --fresh) fresh=1 ;;
        --owner-pid) shift; owner=${1:-} ;;
        --token-expiration) shift; expiration=${1:-} ;;
        -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
        -*) fail "unknown option $1" ;;
        *) args+=("$1") ;;
    esac
    shift
done
[ ${#args[@]} -ge 1 ] && [ ${#args[@]} -le 2 ] \
    || fail "usage: start.sh [--fresh] [--owner-pid PID] [--token-expiration SECONDS] DIR [PORT|auto]"
port=${args[1]:-auto}
case "$port" in
    auto|0) port=auto ;;
    *[!0-9]*) fail "PORT must be a number or 'auto', got '$port'" ;;
esac
case "$owner" in *[!0-9]*) fail "--owner-pid needs a number, got '$owner'" ;; esac
case "$expiration" in *[!0-9]*) fail "--token-expiration needs a number of seconds, got '$expiration'" ;; esac

for tool in setsid flock sha256sum; do
    command -v "$tool" >/dev/null || fail "'$tool' not found (Debian: apt-get install util-linux coreutils)"
done
PY=${KEYSTONE_PYTHON:-python3}
command -v "$PY" >/dev/null || fail "'$PY' not found: install python3 >= 3.11 with its venv module (Debian: apt-get install python3 python3-venv)"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || fail "$("$PY" -V 2>&1) is too old: keystone needs Python >= 3.11"
"$PY" -c 'import venv, ensurepip' 2>/dev/null \
    || fail "$PY has no venv/ensurepip module (Debian: apt-get install python3-venv)"

mkdir -p -- "${args[0]}"
DIR=$(cd -- "${args[0]}" && pwd -P)
# The path goes into an oslo.config file and a SQLAlchemy URL.
case "$DIR" in *[[:space:]\$%\"\'\\\#\;]*) fail "DIR '$DIR' must be a plain path" ;; esac
mkdir -p "$DIR/etc" "$DIR/data" "$DIR/logs" "$DIR/run"
PIDFILE=$DIR/run/keystone.pid
GPIDFILE=$DIR/run/gunicorn.pid
# shellcheck source=../lib/gunicorn.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../lib/gunicorn.sh"

exec 9>"$DIR/run/lock"
flock -w 600 9 || fail "another start/stop holds $DIR/run/lock"

# GET /v3 until it answers: prints the API version. Never through a proxy.
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
        with opener.open(url, timeout=2) as r:
            print(json.load(r)["version"]["id"])
            sys.exit(0)
    except Exception as e:
        last = e
    if time.monotonic() > end:
        sys.exit("no answer from %s in %ss: %s" % (url, limit, last))
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
        oldexp=$(cat "$DIR/run/token-expiration" 2>/dev/null || true)
        [ -z "$expiration" ] || [ "$expiration" = "$oldexp" ] \
            || fail "already running with token expiration ${oldexp:-?} s (pid $old), not $expiration: stop it first"
        ready "http://127.0.0.1:$oldport/v3" 30 >/dev/null || fail "pid $old runs but does not answer"
        watch_owner
        echo "http://127.0.0.1:$oldport/v3"
        exit 0
    fi
    say "removing stale pid file (pid '$old' is not running a server for $DIR)"
    rm -f "$PIDFILE" "$GPIDFILE"
fi

expiration=${expiration:-3600}

# ---- venv (shared by every DIR; one installer at a time)
# shellcheck source=../lib/venv.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../lib/venv.sh"
venv_named keystone "$DIR/logs/install.log" # sets VENV

# ---- config, keys, database
if [ "$port" = auto ]; then
    port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
root="http://127.0.0.1:$port"
if [ "$fresh" = 1 ]; then
    rm -rf -- "$DIR/data/keystone.sqlite" "$DIR/data/keystone.sqlite-journal" "$DIR/keys"
fi
# Receipts (multi-factor auth) share the token keys: never used here, but the default path is /etc.
cat >"$DIR/etc/keystone.conf" <<EOF
# Written by rtrack scripts/keystone/start.sh; rewritten at every start.
[DEFAULT]
log_file = $DIR/logs/keystone.log
use_stderr = false

# bcrypt's minimum: every password and application-credential login hashes once.
[identity]
password_hash_rounds = 4

[database]
connection = sqlite:///$DIR/data/keystone.sqlite

[token]
provider = fernet
expiration = $expiration

[fernet_tokens]
key_repository = $DIR/keys/fernet

[fernet_receipts]
key_repository = $DIR/keys/fernet

[credential]
key_repository = $DIR/keys/credential
EOF
# keystone's app parses sys.argv with oslo.config when it loads, and rejects gunicorn's options:
# gunicorn has parsed them when it runs this file, so hide them (workers fork from here).
echo 'import sys; del sys.argv[1:]' >"$DIR/etc/gunicorn.conf.py"
umask_old=$(umask); umask 077
if [ -n "${KEYSTONE_ADMIN_PASSWORD:-}" ]; then
    printf '%s\n' "$KEYSTONE_ADMIN_PASSWORD" >"$DIR/etc/admin-password"
elif [ ! -s "$DIR/etc/admin-password" ]; then
    "$PY" -c 'import secrets; print(secrets.token_hex(16))' >"$DIR/etc/admin-password"
fi
mkdir -p "$DIR/keys"
umask "$umask_old"

# keystone-manage db_sync, fernet_setup, credential_setup and bootstrap (all idempotent) in one
# process: each keystone-manage spends 2 s importing keystone. Key files belong to whoever runs
# the server; the admin password goes through the environment, never argv.
OS_BOOTSTRAP_PASSWORD=$(head -n1 "$DIR/etc/admin-password") "$VENV/bin/python" - \
    "$DIR/etc/keystone.conf" "$root" "$(id -u)" "$(id -g)" <<'PY' >>"$DIR/logs/manage.log" 2>&1 \
    || { tail -n 20 "$DIR/logs/manage.log" >&2; fail "keystone-manage failed (log: $DIR/logs/manage.log)"; }
import sys
from keystone.cmd import cli
from keystone.conf import CONF
conf, url, uid, gid = sys.argv[1:]
owner = ["--keystone-user", uid, "--keystone-group", gid]
for cmd in (["db_sync"], ["fernet_setup"] + owner, ["credential_setup"] + owner,
            ["bootstrap", "--bootstrap-username", "admin", "--bootstrap-project-name", "admin",
             "--bootstrap-role-name", "admin", "--bootstrap-service-name", "keystone",
             "--bootstrap-region-id", "RegionOne", "--bootstrap-admin-url", url,
             "--bootstrap-internal-url", url, "--bootstrap-public-url", url]):
    print("keystone-manage", *cmd, file=sys.stderr, flush=True)
    CONF.reset()
    cli.main(["keystone-manage", "--config-file", conf] + cmd)
PY

# ---- server
(
    exec 8>&- 9>&-
    cd "$DIR"
    export OS_KEYSTONE_CONFIG_DIR="$DIR/etc"
    exec setsid "$VENV/bin/python" "$VENV/bin/gunicorn" --bind "127.0.0.1:$port" \
        --worker-class gthread --workers 1 --threads 1 --timeout 60 --graceful-timeout 3 \
        --pid "$GPIDFILE" --config "$DIR/etc/gunicorn.conf.py" \
        --error-logfile "$DIR/logs/gunicorn.log" --capture-output --access-logfile "$DIR/logs/access.log" \
        keystone.wsgi.api:application
) </dev/null >>"$DIR/logs/server.out" 2>&1 &
pid=$!
echo "$pid" >"$PIDFILE"
if ! version=$(ready "$root/v3" 60 "$pid"); then
    tail -n 20 "$DIR/logs/gunicorn.log" >&2 || true
    kill -TERM -- "-$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    fail "keystone did not come up on $root"
fi
echo "$port" >"$DIR/run/port"
echo "$expiration" >"$DIR/run/token-expiration"
echo "$root/v3" >"$DIR/run/url"
watch_owner
say "up at $root/v3 (pid $pid, identity API $version, tokens last $expiration s)"
echo "$root/v3"

#!/usr/bin/env bash
# stop.sh: stop the Keystone server that start.sh started for DIR.
#
#   scripts/keystone/stop.sh [--purge] DIR
#
# Signals only the pid in DIR/run/keystone.pid, after checking that it is the gunicorn master
# started for DIR: SIGTERM, then SIGKILL to its own process group after 10 s. Nothing running, a
# stale pid file or a missing DIR is not an error. --purge also deletes the database, the key
# repositories and the logs (etc/, with the admin password, stays).
set -Eeuo pipefail

say() { printf 'keystone/stop: %s\n' "$*" >&2; }
purge=0
if [ "${1:-}" = --purge ]; then purge=1; shift; fi
[ $# -eq 1 ] || { say "usage: stop.sh [--purge] DIR"; exit 2; }
[ -d "$1" ] || { say "no directory $1: nothing to stop"; exit 0; }
DIR=$(cd -- "$1" && pwd -P)
PIDFILE=$DIR/run/keystone.pid
GPIDFILE=$DIR/run/gunicorn.pid
# shellcheck source=../lib/gunicorn.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../lib/gunicorn.sh"

if [ -d "$DIR/run" ]; then
    exec 9>"$DIR/run/lock"
    flock -w 600 9 || { say "another start/stop holds $DIR/run/lock"; exit 1; }
fi

stop_ours "$PIDFILE"
rm -f "$PIDFILE" "$GPIDFILE" "$DIR/run/url" "$DIR/run/port" "$DIR/run/token-expiration"
if [ "$purge" = 1 ]; then
    rm -rf -- "$DIR/data" "$DIR/keys" "$DIR/logs"
fi

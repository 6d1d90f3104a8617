#!/usr/bin/env bash
# stop.sh: stop the Placement server that start.sh started for DIR.
#
#   scripts/placement/stop.sh [--purge] DIR
#
# Signals only the pid in DIR/run/placement.pid, after checking that it is the gunicorn master
# started for DIR: SIGTERM, then SIGKILL to its own process group after 10 s. Nothing running, a
# stale pid file or a missing DIR is not an error. The mariadbd of --db mariadb (DIR/run/mariadb.pid,
# checked the same way) is stopped after it: SIGTERM, SIGKILL after 30 s. --purge also deletes
# the databases (SQLite's and MariaDB's data directory) and logs.
set -Eeuo pipefail

say() { printf 'placement/stop: %s\n' "$*" >&2; }
purge=0
if [ "${1:-}" = --purge ]; then purge=1; shift; fi
[ $# -eq 1 ] || { say "usage: stop.sh [--purge] DIR"; exit 2; }
[ -d "$1" ] || { say "no directory $1: nothing to stop"; exit 0; }
DIR=$(cd -- "$1" && pwd -P)
PIDFILE=$DIR/run/placement.pid
GPIDFILE=$DIR/run/gunicorn.pid
MPIDFILE=$DIR/run/mariadb.pid
MSOCK=$DIR/run/mariadb.sock
# shellcheck source=../lib/gunicorn.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../lib/gunicorn.sh"

if [ -d "$DIR/run" ]; then
    exec 9>"$DIR/run/lock"
    flock -w 600 9 || { say "another start/stop holds $DIR/run/lock"; exit 1; }
fi

stop_ours "$PIDFILE"
stop_mariadb
rm -f "$PIDFILE" "$GPIDFILE" "$DIR/run/url" "$DIR/run/port" "$DIR/run/db"
if [ "$purge" = 1 ]; then
    rm -rf -- "$DIR/data" "$DIR/mariadb" "$DIR/logs"
fi

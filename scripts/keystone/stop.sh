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

if [ -d "$DIR/run" ]; then
    exec 9>"$DIR/run/lock"
    flock -w 600 9 || { say "another start/stop holds $DIR/run/lock"; exit 1; }
fi

ours() {
    local pid=$1
    case "$pid" in ''|*[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    [ "$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" != Z ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$GPIDFILE"
}

pid=$(cat "$PIDFILE" 2>/dev/null || true)
if ours "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do ours "$pid" || break; sleep 0.1; done
    if ours "$pid"; then
        say "pid $pid still running after 10 s: SIGKILL to its process group"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do ours "$pid" || break; sleep 0.1; done
    fi
    say "stopped pid $pid ($DIR)"
elif [ -n "$pid" ]; then
    say "stale pid file ($pid is not a server for $DIR): removed"
fi
rm -f "$PIDFILE" "$GPIDFILE" "$DIR/run/url" "$DIR/run/port" "$DIR/run/token-expiration"
if [ "$purge" = 1 ]; then
    rm -rf -- "$DIR/data" "$DIR/keys" "$DIR/logs"
fi

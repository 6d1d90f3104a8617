# gunicorn.sh: what scripts/placement and scripts/keystone share about their test servers,
# sourced by their start.sh and stop.sh. The caller sets DIR (the server's directory), GPIDFILE
# (gunicorn's pid file in it), HERE (the caller's script directory, holding stop.sh), owner (a
# pid, or empty) and say().

# Is $1 a live process (not a zombie) with the argument $2 on its command line?
runs_with_arg() {
    local pid=$1
    case "$pid" in ''|*[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    [ "$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" != Z ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$2"
}

# Is $1 the gunicorn master started for this DIR? Its command line names GPIDFILE, which no
# other process's does.
ours() { runs_with_arg "$1" "$GPIDFILE"; }

# Stops the server once the owner process is gone (a test binary that panics, aborts or is
# killed leaves nothing running).
watch_owner() {
    [ -n "$owner" ] || return 0
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2/stop.sh" "$3"' \
        watcher "$owner" "$HERE" "$DIR" </dev/null >>"$DIR/logs/watcher.log" 2>&1 8>&- 9>&- &
}

# Stops the server whose pid is in $1, if it is ours: SIGTERM, then SIGKILL to its process
# group after 10 s. A stale pid file is said so.
stop_ours() {
    local pid
    pid=$(cat "$1" 2>/dev/null || true)
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
}

# Is $1 the mariadbd that scripts/placement/start.sh --db mariadb started for this DIR (and not a
# zombie)? Its command line names MSOCK (the caller sets it), which no other process's does.
mariadb_ours() { runs_with_arg "$1" "--socket=$MSOCK"; }

# Stops the mariadbd whose pid is in MPIDFILE, if it is ours: SIGTERM (a clean shutdown), then
# SIGKILL after 30 s.
stop_mariadb() {
    local pid
    pid=$(cat "$MPIDFILE" 2>/dev/null || true)
    if mariadb_ours "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 300); do mariadb_ours "$pid" || break; sleep 0.1; done
        if mariadb_ours "$pid"; then
            say "mariadbd pid $pid still running after 30 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do mariadb_ours "$pid" || break; sleep 0.1; done
        fi
        say "stopped mariadbd pid $pid ($DIR)"
    elif [ -n "$pid" ]; then
        say "stale mariadbd pid file ($pid is not our mariadbd for $DIR): removed"
    fi
    rm -f "$MPIDFILE"
}

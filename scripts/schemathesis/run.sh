#!/usr/bin/env bash
# run.sh: runs `schemathesis run ARGS...` (schemathesis, pinned in requirements.txt and
# constraints.txt beside this script) for rtrack's API test (tests/it/api_schemathesis.rs).
#
#   scripts/schemathesis/run.sh [SCHEMATHESIS RUN ARGS...] LOCATION
#
# - The venv lives in target/schemathesis-venv (override: SCHEMATHESIS_VENV) and is rebuilt only
#   when the interpreter or the pin files change (a stamp file holds their hash); one installer
#   at a time (flock on the venv's .lock file). The install's output goes to the venv's
#   .install.log beside it and its tail to stderr when it fails.
# - schemathesis.toml beside this script holds the settings a run takes (no schemathesis.toml
#   found above the working directory is read); RTRACK_SCHEMATHESIS_CONFIG names another
#   file by its path (e.g. declared-links.toml beside this script: stateful sequences through
#   the document's links only).
# - No hooks: schemathesis reads the document (OpenAPI 3.1) as it is.
# - Requests to loopback never go through a proxy set in the environment.
# - Exits with schemathesis's own status (0: no failure).
#
# Needs bash, python3 >= 3.11 with the venv module (Debian: apt-get install python3-venv), flock
# and sha256sum (util-linux, coreutils), and PyPI for the first install.
set -Eeuo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
fail() { printf 'schemathesis/run: error: %s\n' "$*" >&2; exit 2; }

case "${1:-}" in
    -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
esac
[ $# -ge 1 ] || fail "usage: run.sh [SCHEMATHESIS RUN ARGS...] LOCATION (see: run.sh --help)"

for tool in flock sha256sum; do
    command -v "$tool" >/dev/null || fail "'$tool' not found (Debian: apt-get install util-linux coreutils)"
done
PY=${SCHEMATHESIS_PYTHON:-python3}
command -v "$PY" >/dev/null \
    || fail "'$PY' not found: install python3 >= 3.11 with its venv module (Debian: apt-get install python3 python3-venv)"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || fail "$("$PY" -V 2>&1) is too old: rtrack's schemathesis venv needs Python >= 3.11 (Debian: apt-get install python3)"
"$PY" -c 'import venv, ensurepip' 2>/dev/null \
    || fail "$PY has no venv/ensurepip module (Debian: apt-get install python3-venv)"

# ---- venv (one installer at a time)
# shellcheck source=../lib/venv.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../lib/venv.sh"
venv_named schemathesis # sets VENV; pip logs to $VENV.install.log

# Loopback only: never through a proxy from the environment.
export NO_PROXY="127.0.0.1,localhost,::1${NO_PROXY:+,$NO_PROXY}"
export no_proxy="$NO_PROXY"
# The document alone decides what is generated: no hooks, whatever the environment says.
unset SCHEMATHESIS_HOOKS
exec "$VENV/bin/schemathesis" --config-file "${RTRACK_SCHEMATHESIS_CONFIG:-$HERE/schemathesis.toml}" run "$@"

#!/usr/bin/env bash
# osc.sh URL ARGS...: runs `openstack ARGS` (python-openstackclient with osc-placement) against
# the test Placement at URL, as an operator would inspect rtrack's provider tree. The client
# lives in its own venv (target/osc-venv; pinned in osc-requirements.txt and osc-constraints.txt,
# installed from PyPI on first use, again when the pins change). The test Placement runs with
# noauth2: the client sends the token "admin" to the endpoint directly (auth type admin_token).
set -euo pipefail
HERE=$(cd -- "$(dirname -- "$0")" && pwd -P)
REPO=$(cd -- "$HERE/../.." && pwd -P)
fail() { echo "placement/osc: error: $*" >&2; exit 1; }
[ "$#" -ge 2 ] || fail "usage: osc.sh URL ARGS..."
url=$1
shift
PY=${PYTHON:-python3}
VENV=${OSC_VENV:-$REPO/target/osc-venv}
mkdir -p "$(dirname -- "$VENV")"
stamp=$({ "$PY" -c 'import sys, platform; print(sys.version, platform.machine())'
          cat "$HERE/osc-requirements.txt" "$HERE/osc-constraints.txt"; } | sha256sum | cut -d' ' -f1)
exec 8>"$VENV.lock"
flock -w 900 8 || fail "another install into $VENV takes too long ($VENV.lock)"
if [ "$(cat "$VENV/.rtrack-stamp" 2>/dev/null)" != "$stamp" ] || [ ! -x "$VENV/bin/openstack" ]; then
    rm -rf -- "$VENV"
    { "$PY" -m venv "$VENV" \
        && "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input \
            -r "$HERE/osc-requirements.txt" -c "$HERE/osc-constraints.txt"; } >"$VENV.install.log" 2>&1 \
        || { tail -n 20 "$VENV.install.log" >&2; rm -rf -- "$VENV"; fail "venv install failed (PyPI reachable?)"; }
    echo "$stamp" >"$VENV/.rtrack-stamp"
fi
flock -u 8
exec "$VENV/bin/openstack" --os-auth-type admin_token --os-token admin --os-endpoint "$url" \
    --os-placement-api-version 1.39 "$@"

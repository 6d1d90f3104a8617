#!/usr/bin/env bash
# osc.sh URL ARGS...: runs `openstack ARGS` (python-openstackclient with osc-placement) against
# the test Placement at URL, as an operator would inspect rtrack's provider tree. The client
# lives in its own venv (target/osc-venv; pinned in osc-requirements.txt and osc-constraints.txt,
# installed from PyPI on first use, again when the pins change). The test Placement runs with
# noauth2: the client sends the token "admin" to the endpoint directly (auth type admin_token).
set -euo pipefail
fail() { echo "placement/osc: error: $*" >&2; exit 1; }
[ "$#" -ge 2 ] || fail "usage: osc.sh URL ARGS..."
url=$1
shift
PY=${PYTHON:-python3}
# shellcheck source=../lib/venv.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/../lib/venv.sh"
venv_named osc # sets VENV; pip logs to $VENV.install.log
exec "$VENV/bin/openstack" --os-auth-type admin_token --os-token admin --os-endpoint "$url" \
    --os-placement-api-version 1.39 "$@"

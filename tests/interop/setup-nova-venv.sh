#!/usr/bin/env bash
# Creates (or reuses) the Python venv holding the real OpenStack Nova 34.0.0 from PyPI for the
# interop and differential tests. Usage: tests/interop/setup-nova-venv.sh VENV_DIR
# It is the venv scripts/nova-functional uses (same pins, scripts/nova-functional.d/
# requirements.txt and constraints.txt, and the same stamp and lock, scripts/lib/venv.sh):
# whichever needs it first builds it, once per change of the pins, and CI installs Nova once.
# Needs python3 >= 3.11 with the venv module (Debian: python3-venv) and PyPI access.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pins="$here/../../scripts/nova-functional.d"
venv="${1:?usage: setup-nova-venv.sh VENV_DIR}"
PY="${PYTHON:-python3}"
fail() { echo "setup-nova-venv: $*" >&2; exit 3; }

command -v "$PY" >/dev/null || fail "$PY not found; install Python 3.11+ (Debian: apt-get install python3 python3-venv)"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || fail "nova 34.0.0 needs Python >= 3.11; $("$PY" --version) found"
"$PY" -c 'import venv, ensurepip' 2>/dev/null \
  || fail "the Python venv module is missing (Debian: apt-get install python3-venv)"
mkdir -p "$(dirname -- "$venv")"
# shellcheck source=../../scripts/lib/venv.sh
. "$here/../../scripts/lib/venv.sh"
venv_ensure "$venv" "$pins/requirements.txt" "$pins/constraints.txt" \
  'from nova import objects; objects.register_all()' "$venv.install.log"

#!/usr/bin/env bash
# Creates (or reuses) a Python venv holding the real OpenStack Nova 34.0.0 from PyPI, for the
# interop test. Usage: tests/interop/setup-nova-venv.sh VENV_DIR
# The venv is rebuilt only when the interpreter or the pins change (a stamp file records them).
# Needs python3 >= 3.11 with the venv module (Debian: python3-venv) and PyPI access.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:?usage: setup-nova-venv.sh VENV_DIR}"
python="${PYTHON:-python3}"
constraints="$here/nova-constraints.txt"

command -v "$python" >/dev/null || { echo "setup-nova-venv: $python not found; install Python 3.11+ (Debian: apt-get install python3 python3-venv)" >&2; exit 3; }
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "setup-nova-venv: nova 34.0.0 needs Python >= 3.11; $("$python" --version) found" >&2; exit 3; }
"$python" -c 'import venv, ensurepip' 2>/dev/null \
  || { echo "setup-nova-venv: the Python venv module is missing (Debian: apt-get install python3-venv)" >&2; exit 3; }

stamp="$("$python" --version 2>&1) $(sha256sum "$constraints" "$0" | sha256sum | cut -c1-16)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.rtrack-stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
echo "setup-nova-venv: creating $venv (nova 34.0.0, about a minute)" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip --disable-pip-version-check -q install -c "$constraints" pip
"$venv/bin/python" -m pip --disable-pip-version-check -q install -c "$constraints" "nova==34.0.0"
"$venv/bin/python" -W ignore -c 'from nova import objects; objects.register_all()'
echo "$stamp" > "$venv/.rtrack-stamp"

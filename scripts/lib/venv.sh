# venv.sh: a pinned Python venv for rtrack's test tools, built once per pin change. Sourced by
# the tools' scripts (scripts/placement, scripts/keystone, scripts/schemathesis,
# scripts/nova-functional; tests/interop/setup-nova-venv.sh builds Nova's at the directory its
# caller names, from the same pins) and by scripts/test --venvs; the caller defines fail(), and
# sets PY (python3 >= 3.11 with venv) for venv_ensure (venv_named picks each tool's own).

# venv_ensure VENV REQUIREMENTS CONSTRAINTS CHECK LOG: (re)builds VENV from the pin files when
# the interpreter or the pins changed (a stamp file holds their hash) or its python is gone; one
# installer at a time (flock on VENV.lock); pip's output appended to LOG. `python -c CHECK` runs
# once, after the install: the stamp is written only when it passed. Not at every call: importing
# a service's WSGI application costs seconds, and the tests start servers and clients by the
# dozen (a venv broken by hand afterwards shows in the server's own log; remove the stamp to
# rebuild it).
venv_ensure() {
    local venv=$1 req=$2 con=$3 check=$4 log=$5 stamp
    mkdir -p "$(dirname -- "$venv")"
    stamp=$({ "$PY" -c 'import sys, platform; print(sys.version, platform.machine())'
              cat "$req" "$con"; } | sha256sum | cut -d' ' -f1)
    exec 8>"$venv.lock"
    flock -w 900 8 || fail "another install into $venv takes too long ($venv.lock)"
    if [ "$(cat "$venv/.rtrack-stamp" 2>/dev/null)" != "$stamp" ] || [ ! -x "$venv/bin/python" ]; then
        printf 'installing %s into %s (log: %s)\n' "$(basename -- "$req")" "$venv" "$log" >&2
        rm -rf -- "$venv"
        { "$PY" -m venv "$venv" \
            && "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
                -r "$req" -c "$con"; } >>"$log" 2>&1 \
            || { tail -n 20 "$log" >&2; rm -rf -- "$venv"; fail "venv install into $venv failed (PyPI reachable? log: $log)"; }
        "$venv/bin/python" -c "$check" >>"$log" 2>&1 \
            || { tail -n 20 "$log" >&2; rm -rf -- "$venv"; fail "the venv in $venv installed but 'python -c \"$check\"' fails in it (log: $log)"; }
        echo "$stamp" >"$venv/.rtrack-stamp"
    fi
    flock -u 8
    exec 8>&-
}

# venv_named NAME [LOG]: sets VENV to the named test tool's venv and builds it when needed (as
# venv_ensure; pip's output to LOG, else VENV.install.log). The table of the tools' venvs: where
# each lives (its environment variable overrides target/NAME-venv), its interpreter (its
# *_PYTHON variable, else python3: the stamp holds the interpreter's version, so every caller
# must pick the same one), its pin files (in scripts/DIR/, with a prefix for the OpenStack
# client's), and the import that proves the install. Each tool's script uses it, and so does
# `scripts/test --venvs`, which builds them all ahead of the tests.
venv_named() {
    local name=$1 root pins prefix='' check PY
    root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
    case $name in
        nova-functional)
            PY=${PYTHON:-python3} VENV=${NOVA_FUNCTIONAL_VENV:-$root/target/nova-functional-venv}
            pins=nova-functional.d
            check='import nova, placement, testtools, wsgi_intercept, sqlalchemy; assert sqlalchemy.__version__.startswith("2.0.")' ;;
        placement)
            PY=${PLACEMENT_PYTHON:-python3} VENV=${PLACEMENT_VENV:-$root/target/placement-venv}
            pins=placement check='import placement.wsgi, gunicorn, pymysql' ;;
        keystone)
            PY=${KEYSTONE_PYTHON:-python3} VENV=${KEYSTONE_VENV:-$root/target/keystone-venv}
            pins=keystone check='import keystone.wsgi, gunicorn' ;;
        osc)
            PY=${PYTHON:-python3} VENV=${OSC_VENV:-$root/target/osc-venv}
            pins=placement prefix=osc- check='import openstackclient.shell, osc_placement' ;;
        schemathesis)
            PY=${SCHEMATHESIS_PYTHON:-python3} VENV=${SCHEMATHESIS_VENV:-$root/target/schemathesis-venv}
            pins=schemathesis check='import schemathesis' ;;
        *) fail "venv_named: no venv named '$name' (expected nova-functional, placement, keystone, osc or schemathesis)" ;;
    esac
    pins=$root/scripts/$pins/$prefix
    venv_ensure "$VENV" "${pins}requirements.txt" "${pins}constraints.txt" "$check" "${2:-$VENV.install.log}"
}

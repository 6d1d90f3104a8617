#!/usr/bin/env bash
# Benchmark (not a test) of nova-compute on rtrack against nova-compute on Nova's own tracker,
# side by side (issue 22):
#
#  1. wall time of Nova's functional test modules (scripts/nova-functional, --workers N) with
#     Nova's tracker (--baseline) and with rtrack's, per module and in total, with their
#     pass/fail counts;
#  2. a claim storm through nova-compute (scripts/nova-functional.d/claim_storm.py): BUILDS
#     servers built and deleted on one fake-libvirt host, CONCURRENCY at a time, from Nova's
#     functional test fixtures (API, conductor, scheduler, Placement, one compute); every
#     instance_claim timed (p50/p90/p99/max, with and without the wait for the compute_resources
#     lock), update_usage too, build time (POST to ACTIVE), storm wall time.
#
#   scripts/bench-nova-compute.sh [--modules quick|all|"MODULE ..."] [--workers N]
#                                 [--builds N] [--concurrency N] [--flavor plain|pinned]
#                                 [--no-modules] [--no-storm]
#
# Defaults: the quick modules (test_power_manage test_reshape test_vpmem test_amd_sev
# test_shared_resource_provider test_rt_servers test_intel_tdx: about 100 s with Nova's tracker
# run one after another), 2 workers, 200 builds, 8 at a time, flavor plain (1 vCPU, 512 MB;
# `pinned` adds hw:cpu_policy=dedicated on a host with 12 dedicated CPUs). About 8 minutes on an
# idle 2-core machine; `--modules all` adds about 15 minutes (the 14 modules of issue 22, each
# tracker). Everything runs under nice -n 10 (NOVA_FUNCTIONAL_NICE).
#
# Results: the table on stdout, and target/nova-functional/bench/bench-<UTC time>.json and .txt.
# Module results of the benchmark go to target/nova-functional/bench/ (not the test run's
# directory). Needs what scripts/nova-functional needs (it builds the venv and rtrackd).
set -Eeuo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd -- "$HERE/.." && pwd)
say() { printf 'bench-nova-compute: %s\n' "$*" >&2; }
fail() { printf 'bench-nova-compute: error: %s\n' "$*" >&2; exit 2; }

QUICK="test_power_manage test_reshape test_vpmem test_amd_sev test_shared_resource_provider test_rt_servers test_intel_tdx"
modules=quick workers=2 builds=200 concurrency=8 flavor=plain do_modules=1 do_storm=1
while [ $# -gt 0 ]; do
    case "$1" in
        --modules) shift; modules=${1:?--modules needs a value} ;;
        --workers) shift; workers=${1:?} ;;
        --builds) shift; builds=${1:?} ;;
        --concurrency) shift; concurrency=${1:?} ;;
        --flavor) shift; flavor=${1:?} ;;
        --no-modules) do_modules=0 ;;
        --no-storm) do_storm=0 ;;
        -h|--help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) fail "unknown argument $1 (--help)" ;;
    esac
    shift
done
case "$modules" in
    quick) mods=$QUICK ;;
    all) mods= ;;   # scripts/nova-functional's default: the 14 modules
    *) mods=$modules ;;
esac
for n in "$workers" "$builds" "$concurrency"; do
    case "$n" in ''|*[!0-9]*) fail "--workers, --builds and --concurrency take numbers" ;; esac
done

# The venv and rtrackd, as the tests have them.
prep=$("$REPO/scripts/nova-functional" --prepare)
PY=$(printf '%s\n' "$prep" | sed -n 's/^python=//p')
RTRACKD=$(printf '%s\n' "$prep" | sed -n 's/^rtrackd=//p')
[ -x "$PY" ] && [ -x "$RTRACKD" ] || fail "scripts/nova-functional --prepare failed"

OUT="$REPO/target/nova-functional/bench"
mkdir -p "$OUT"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
export NICE_LEVEL=${NOVA_FUNCTIONAL_NICE:-10}
t0=$(date +%s)

if [ "$do_modules" = 1 ]; then
    for mode in baseline rtrack; do
        say "modules with $([ $mode = baseline ] && echo "Nova's tracker" || echo rtrack): ${mods:-the 14 of issue 22}, $workers workers"
        flag=(); [ $mode = baseline ] && flag=(--baseline)
        # shellcheck disable=SC2086
        NOVA_FUNCTIONAL_OUT="$OUT/modules" RTRACKD="$RTRACKD" \
            "$REPO/scripts/nova-functional" "${flag[@]}" --workers "$workers" $mods \
            >"$OUT/modules-$mode.log" 2>&1 || true   # failures are counted, not fatal
        tail -n 1 "$OUT/modules-$mode.log" >&2
    done
fi

if [ "$do_storm" = 1 ]; then
    for tracker in nova rtrack; do
        say "claim storm with $([ $tracker = nova ] && echo "Nova's tracker" || echo rtrack): $builds builds, $concurrency at a time, flavor $flavor"
        (cd "$REPO" && nice -n "$NICE_LEVEL" "$PY" scripts/nova-functional.d/claim_storm.py \
            --tracker "$tracker" --rtrackd "$RTRACKD" --builds "$builds" \
            --concurrency "$concurrency" --flavor "$flavor" --poll 0.25 \
            --out "$OUT/storm-$tracker.json") >"$OUT/storm-$tracker.log" 2>&1 \
            || { tail -n 30 "$OUT/storm-$tracker.log" >&2; say "the $tracker storm failed (log: $OUT/storm-$tracker.log)"; }
    done
fi

"$PY" - "$OUT" "$stamp" "$do_modules" "$do_storm" "$(( $(date +%s) - t0 ))" "$workers" <<'EOF'
import json, os, sys
import xml.etree.ElementTree as ET

out, stamp, do_modules, do_storm, total_s, workers = sys.argv[1:]
lines, result = [], {'time': stamp, 'bench_seconds': int(total_s)}

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def counts(mode):
    c = {}
    try:
        root = ET.parse(os.path.join(out, 'modules', mode + '.xml')).getroot()
    except (OSError, ET.ParseError):
        return c
    for s in root:
        name = s.get('name', '').split(' ')[0]
        n = f = k = 0
        for tc in s.iter('testcase'):
            n += 1
            if tc.find('failure') is not None or tc.find('error') is not None:
                f += 1
            elif tc.find('skipped') is not None:
                k += 1
        c[name] = (n - f - k, f, k)
    return c

if do_modules == '1':
    tb, tr = load(os.path.join(out, 'modules', 'baseline-times.json')), \
        load(os.path.join(out, 'modules', 'rtrack-times.json'))
    cb, cr = counts('baseline'), counts('rtrack')
    if tb and tr:
        lines.append("== Nova's functional test modules, wall seconds (%s workers); passed/failed/skipped"
                     % workers)
        lines.append('  %-32s %22s %22s %7s' % ('module', "Nova's tracker", 'rtrack', 'ratio'))
        mods = sorted(set(tb['modules']) | set(tr['modules']),
                      key=lambda m: -tb['modules'].get(m, 0))
        for m in mods:
            b, r = tb['modules'].get(m), tr['modules'].get(m)
            fmt = lambda t, c: ('%6.1f s %3d/%d/%d' % ((t,) + c) if t is not None and c
                                else '%6s' % '-')
            lines.append('  %-32s %22s %22s %7s' % (
                m, fmt(b, cb.get(m)), fmt(r, cr.get(m)),
                '%.2f' % (r / b) if b and r else '-'))
        sb = tuple(sum(x[i] for x in cb.values()) for i in range(3))
        sr = tuple(sum(x[i] for x in cr.values()) for i in range(3))
        lines.append('  %-32s %9.1f s %3d/%d/%d %9.1f s %3d/%d/%d %7.2f' % (
            'whole run (wall)', tb['wall'], *sb, tr['wall'], *sr, tr['wall'] / tb['wall']))
        result['modules'] = {'workers': int(workers), 'baseline': tb, 'rtrack': tr,
                             'counts': {'baseline': cb, 'rtrack': cr}}

if do_storm == '1':
    sn, sr = load(os.path.join(out, 'storm-nova.json')), load(os.path.join(out, 'storm-rtrack.json'))
    if sn or sr:
        any_ = sn or sr
        lines.append('')
        lines.append('== claim storm through nova-compute: %s builds and deletes on one host, %s at a time, '
                     'flavor %s' % (any_.get('builds'), any_.get('concurrency'), any_.get('flavor')))
        lines.append('  %-44s %16s %16s' % ('', "Nova's tracker", 'rtrack'))
        def cell(d, key, p):
            try:
                return '%.1f' % d[key][p]
            except (TypeError, KeyError):
                return '-'
        for key, label in (('instance_claim', 'instance_claim, lock wait included'),
                           ('instance_claim_in_lock', 'instance_claim, inside the lock'),
                           ('update_usage', 'update_usage, lock wait included'),
                           ('update_usage_in_lock', 'update_usage, inside the lock'),
                           ('build_post_to_active', 'build, POST to ACTIVE')):
            for p in ('p50_ms', 'p99_ms'):
                lines.append('  %-44s %16s %16s' % ('%s %s' % (label, p.split('_')[0]),
                                                    cell(sn, key, p), cell(sr, key, p)))
        def get(d, k):
            return '-' if not d or k not in d else str(d[k])
        for k, label in (('wall_s', 'storm wall (s)'), ('builds_per_s', 'builds per second'),
                         ('ok', 'every build ACTIVE, no error')):
            lines.append('  %-44s %16s %16s' % (label, get(sn, k), get(sr, k)))
        result['storm'] = {'nova': sn, 'rtrack': sr}

lines.append('')
lines.append('benchmark: %s s in all; load average at the end: %s' % (
    total_s, ' '.join(open('/proc/loadavg').read().split()[:3])))
text = '\n'.join(lines)
print(text)
with open(os.path.join(out, 'bench-%s.txt' % stamp), 'w') as f:
    f.write(text + '\n')
with open(os.path.join(out, 'bench-%s.json' % stamp), 'w') as f:
    json.dump(result, f, indent=1)
print('(%s)' % os.path.join(out, 'bench-%s.{txt,json}' % stamp))
EOF

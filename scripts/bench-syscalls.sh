#!/usr/bin/env bash
# Counts the syscalls of `rtrackd --once` on a synthetic tree (strace -f -c) and the files it
# opens per PCI function and per CPU, beside the goal and the last stop's figures. PRESET is a
# synth-host preset: `large` (256 CPUs, 1,029 PCI functions; the default) or `large-gpu`.
# BASE is another rtrackd binary (e.g. one built from an earlier commit) run on the same tree
# in the same way, side by side; without it the last stop's figures are quoted.
#
#   scripts/bench-syscalls.sh [PRESET] [BASE]   (needs strace: Debian/Ubuntu `apt-get install strace`)
#
# Goal (issue 25, the agent's own footprint): at most 6 files opened (and read) per PCI function
# and per CPU. The figures are counted, not timed, so they do not depend on the machine.
set -euo pipefail
preset=${1:-large}
base=${2:-}
cd "$(dirname "$0")/.."
command -v strace >/dev/null || {
    echo "bench-syscalls: strace not found; install it (Debian/Ubuntu: apt-get install strace)" >&2
    exit 2
}

cargo build -q --release --bin rtrackd -p rtrack
cargo build -q --release --bin synth-host -p rtrack-fixtures
tree=$(mktemp -d "${TMPDIR:-/tmp}/rtrack-syscalls.XXXXXX")
trap 'rm -rf "$tree"' EXIT
target/release/synth-host "$preset" "$tree/host" >/dev/null

# Counts one binary's syscalls into $tree/<label>.{c,opens,out}.
measure() {
    local label=$1 bin=$2
    strace -f -c -o "$tree/$label.c" "$bin" --once --root "$tree/host" --instances-path none \
        >"$tree/$label.out"
    strace -f -y -e trace=openat2,openat,open,read,readlinkat -o "$tree/$label.trace" \
        "$bin" --once --root "$tree/host" --instances-path none >/dev/null
}
measure now target/release/rtrackd
[ -n "$base" ] && measure base "$base"
# The two reports must be the same but for the clock (probed_at, created_at, uptime).
same_report() {
    local clock='s/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z/TIME/g; s/ [0-9:]+ up .*load average/ UPTIME/'
    cmp -s <(sed -E "$clock" "$1") <(sed -E "$clock" "$2")
}
if [ -n "$base" ]; then
    if same_report "$tree/now.out" "$tree/base.out"; then
        echo "reports: identical but for the clock"
    else
        echo "bench-syscalls: WARNING: the two binaries' --once reports differ" >&2
    fi
fi

python3 - "$tree" "$preset" "${base:+base}" <<'PY'
import json, re, sys
tree, preset, has_base = sys.argv[1], sys.argv[2], sys.argv[3] == "base"
# The last stop's figures (commit 93aa7c0, large preset with the package, die and cluster
# files a 6.8 kernel writes, strace -f -c). Before them: 7a78510's 7,839 openat2, 7,705 close,
# 5,262 read, 4,110 readlinkat; the issue's 11,400, 10,100, 7,900 and 4,100.
LAST_STOP = {"openat2": 6690, "close": 6681, "read": 5388, "readlinkat": 4110}
CALLS = ["openat2", "close", "read", "readlinkat"]

def counts(label):
    out = {}
    for line in open(f"{tree}/{label}.c"):
        f = line.split()
        # strace -c rows: % time, seconds, usecs/call, calls, [errors], syscall
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] in CALLS:
            out[f[-1]] = int(f[3])
    return out

PCI = re.compile(r"/(bus/pci/devices|devices/pci[0-9a-f]+:[0-9a-f]+)/[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
CPU = re.compile(r"/devices/system/cpu/cpu[0-9]+/")
def by_class(label):
    # `strace -y` names the file of an fd and the directory of a relative open:
    # openat2(5</.../0000:17:00.0>, "uevent", ...), read(6</.../uevent>, ...).
    cls = {k: {c: 0 for c in ["open", "read", "readlinkat"]} for k in ["pci", "cpu", "other"]}
    for line in open(f"{tree}/{label}.trace"):
        m = re.search(r'\b(openat2|openat|open|readlinkat|read)\((?:\d+<([^>]*)>|AT_FDCWD)?(?:, "([^"]*)")?', line)
        if not m:
            continue
        call, d, name = m.group(1), m.group(2) or "", m.group(3)
        full = d + ("/" + name if name is not None and call != "read" else "")
        kind = "pci" if PCI.search(full) else "cpu" if CPU.search(full + "/") else "other"
        cls[kind]["open" if call.startswith("open") else call] += 1
    return cls

report = json.load(open(f"{tree}/now.out"))
def find(obj, key):
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for v in obj:
            r = find(v, key)
            if r is not None:
                return r
    return None
functions = len(find(report, "pci_devices") or [])
cpus = len((find(report, "cpu") or {}).get("cpus", []))
units = functions + cpus
now = counts("now")
cols = [("last stop 93aa7c0", LAST_STOP if preset == "large" else {})]
if has_base:
    cols.append(("base binary", counts("base")))
print(f"{preset} host: {functions} PCI functions, {cpus} CPUs ({units} function-or-CPU)")
print("syscalls of rtrackd --once (strace -f -c), total (per function-or-CPU):")
head = "".join(f"{c[0]:>22}" for c in cols)
print(f"  {'syscall':<12}{head}{'now':>22}   goal")
for call in CALLS:
    row = "".join(f"{(f'{c[1][call]:,} ({c[1][call]/units:.2f})' if call in c[1] else '-'):>22}" for c in cols)
    n = now.get(call, 0)
    goal = "<= 6 per function-or-CPU" if call in ("openat2", "read") else ""
    ok = "" if not goal else ("  ok" if n / units <= 6 else "  ABOVE GOAL")
    print(f"  {call:<12}{row}{f'{n:,} ({n/units:.2f})':>22}   {goal}{ok}")
print("by what the file belongs to (opens include failed ones):")
b, n = (by_class("base") if has_base else None), by_class("now")
for kind, count, name in [("pci", functions, "PCI function"), ("cpu", cpus, "CPU"), ("other", 1, "")]:
    for call in ["open", "read", "readlinkat"]:
        per = lambda v: f" ({v/count:.2f} per {name})" if name else ""
        before = f"{b[kind][call]:,}{per(b[kind][call])}  ->  " if b else ""
        goal = ""
        if name and call in ("open", "read"):
            goal = "   goal <= 6: " + ("ok" if n[kind][call] / count <= 6 else "ABOVE GOAL")
        print(f"  {kind:<6}{call:<11}{before}{n[kind][call]:,}{per(n[kind][call])}{goal}")
PY

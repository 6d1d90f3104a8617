#!/usr/bin/env bash
# Times `rtrackd --once` against `lspci -nn -vmm -D` on the same synthetic tree, side by side in
# one run, and prints the ratio. PRESET is a synth-host preset: `large` (8 NUMA nodes, 256 CPUs,
# 4 PFs x 256 VFs, an NVMe drive; the default) or `large-gpu` (the same plus 4 GPUs and 6 NVMe
# drives: 1,039 functions).
#
#   scripts/bench-vs-lspci.sh [RUNS] [PRESET]   (needs lspci from pciutils; uses hyperfine if present)
#
# Target: rtrackd --once takes at most half the time of lspci (ratio <= 0.5).
set -euo pipefail
runs=${1:-30}
preset=${2:-large}
cd "$(dirname "$0")/.."
command -v lspci >/dev/null || { echo "bench-vs-lspci: lspci not found; install pciutils (apt-get install pciutils)" >&2; exit 2; }

cargo build -q --release --bin rtrackd -p rtrack
cargo build -q --release --bin synth-host -p rtrack-fixtures
tree=$(mktemp -d "${TMPDIR:-/tmp}/rtrack-bench.XXXXXX")
trap 'rm -rf "$tree"' EXIT
target/release/synth-host "$preset" "$tree/host" >/dev/null

rtrack_cmd="target/release/rtrackd --once --root $tree/host --instances-path none"
lspci_cmd="lspci -nn -vmm -D -A linux-sysfs -O sysfs.path=$tree/host/sys/bus/pci"
# Both must succeed and see the same functions.
n_rtrack=$($rtrack_cmd | grep -c '"address"' || true)
n_lspci=$($lspci_cmd | grep -c '^Slot:' || true)
echo "$preset host, functions: rtrackd $n_rtrack, lspci $n_lspci"

if command -v hyperfine >/dev/null; then
    hyperfine -N --warmup 3 --runs "$runs" --export-json "$tree/times.json" "$rtrack_cmd" "$lspci_cmd" >&2
    python3 - "$tree/times.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
a, b = r[0]["mean"], r[1]["mean"]
am, bm = r[0]["median"], r[1]["median"]
print(f"rtrackd --once: {a*1000:.1f} ms   lspci: {b*1000:.1f} ms   ratio rtrackd/lspci = {a/b:.2f} (target <= 0.50)")
print(f"medians: rtrackd --once {am*1000:.1f} ms   lspci {bm*1000:.1f} ms   ratio {am/bm:.2f}")
PY
else
    # Interleave the two so machine noise hits both alike.
    t_r=0; t_l=0
    for _ in $(seq "$runs"); do
        s=$(date +%s%N); $rtrack_cmd >/dev/null; e=$(date +%s%N); t_r=$((t_r + e - s))
        s=$(date +%s%N); $lspci_cmd >/dev/null; e=$(date +%s%N); t_l=$((t_l + e - s))
    done
    awk -v r="$t_r" -v l="$t_l" -v n="$runs" 'BEGIN { printf "rtrackd --once: %.1f ms   lspci: %.1f ms   ratio rtrackd/lspci = %.2f (target <= 0.50)\n", r/n/1e6, l/n/1e6, r/l }'
fi

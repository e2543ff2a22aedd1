#!/bin/sh
# bench/mmap.sh — the program's own mmap: the kernel against vmapalloc.
#
# Runs bench/mmap (mmap / touch every page / munmap of 64 KiB..4 MiB, every
# thread its own loop) without a preload (the kernel's mmap) and with
# LD_PRELOAD=libvmapalloc.so, interleaved (the order alternates every
# repeat), at each thread count, R times each, and prints the medians:
# ops/s, the ratio vmapalloc/kernel, peak RSS (VmHWM) and its difference,
# and minor faults.
#
# Goal: ratio >= 2 at every thread count, and vmapalloc's peak RSS
# no more than VMAPALLOC_LAZY_MAX (64 MiB here) above the kernel's.
#
#   bench/mmap.sh [--build-dir DIR] [--binary FILE] [--lib FILE]
#                 [--threads "1 2 4 8"] [--seconds T] [--repeats R] [--check]
#
# The vmapalloc runs get VMAPALLOC_LAZY_MAX=64M unless it is set already.
# Exit status: 0 when every run succeeded (with --check: and the goal was
# met), 1 when a run failed (or, with --check, the goal was missed), 2 on a
# usage error or a missing binary/library.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
binary=""
lib=""
threads="1 2 4 8"
seconds=1
repeats=3
check=0

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "$1"; }

while [ $# -gt 0 ]; do
    case $1 in
        --build-dir) build=${2:?}; shift 2 ;;
        --binary) binary=${2:?}; shift 2 ;;
        --lib) lib=${2:?}; shift 2 ;;
        --threads) threads=${2:?}; shift 2 ;;
        --seconds) seconds=${2:?}; shift 2 ;;
        --repeats) repeats=${2:?}; shift 2 ;;
        --check) check=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "mmap.sh: unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
done
[ -n "$binary" ] || binary="$build/bench/mmap"
[ -n "$lib" ] || lib="$build/preload/libvmapalloc.so"
[ -x "$binary" ] || { echo "mmap.sh: $binary not found (meson compile -C $build)" >&2; exit 2; }
[ -f "$lib" ] || { echo "mmap.sh: $lib not found" >&2; exit 2; }
lazy=${VMAPALLOC_LAZY_MAX:-64M}
lazy_kib=$(echo "$lazy" | awk '{ v = $0 + 0; u = toupper(substr($0, length($0)));
    if (u == "K") v *= 1; else if (u == "M") v *= 1024; else if (u == "G") v *= 1048576;
    else if (u == "T") v *= 1073741824; else v /= 1024; printf "%d", v }')

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mmapbench.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM

# run WHO THREADS: appends "who threads ops_per_s hwm_kib minflt" to $tmp/runs
run() {
    if [ "$1" = kernel ]; then
        out=$(env -u LD_PRELOAD "$binary" --threads "$2" --seconds "$seconds" 2>"$tmp/err")
    else
        out=$(env LD_PRELOAD="$lib" VMAPALLOC_LAZY_MAX="$lazy" \
            "$binary" --threads "$2" --seconds "$seconds" 2>"$tmp/err")
    fi
    st=$?
    case "$st:$out" in
        0:*verify=ok*) ;;
        *) echo "mmap.sh: $1 run with $2 threads failed (status $st): $out $(cat "$tmp/err")" >&2
           return 1 ;;
    esac
    if [ "$1" = vmapalloc ]; then
        case $out in
            *mmap_lib=libvmapalloc*) ;;
            *) echo "mmap.sh: the preload did not take effect: $out" >&2; return 1 ;;
        esac
    fi
    echo "$out" | awk -v who="$1" '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        print who, f["threads"], f["ops_per_s"], f["hwm_kib"], f["minflt"] }' >>"$tmp/runs"
}

echo "bench/mmap: $(basename "$binary") at threads $threads, ${seconds}s per run, $repeats repeats, interleaved;" \
     "vmapalloc with VMAPALLOC_LAZY_MAX=$lazy"
failed=0
r=1
while [ "$r" -le "$repeats" ]; do
    for t in $threads; do
        if [ $((r % 2)) -eq 1 ]; then order="kernel vmapalloc"; else order="vmapalloc kernel"; fi
        for who in $order; do
            run "$who" "$t" || failed=1
        done
    done
    r=$((r + 1))
done
[ "$failed" -eq 0 ] || { echo "mmap.sh: some runs failed" >&2; exit 1; }

# Medians per (who, threads) of ops/s, VmHWM and minor faults; then the table.
awk -v lazy_kib="$lazy_kib" -v order="$threads" '
function median(key, col,    n, i, j, t, a) {
    n = cnt[key]
    for (i = 1; i <= n; i++) a[i] = val[key, i, col]
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ key = $1 SUBSEP $2; n = ++cnt[key]; val[key, n, 1] = $3; val[key, n, 2] = $4; val[key, n, 3] = $5 }
END {
    printf "%7s %13s %13s %7s %11s %11s %10s %12s %12s  %s\n", "threads", "kernel op/s", "vmap op/s",
        "ratio", "kernel HWM", "vmap HWM", "RSS diff", "kernel flt", "vmap flt", "goal"
    nt = split(order, ts, " "); met = 1
    for (i = 1; i <= nt; i++) {
        t = ts[i]; k = "kernel" SUBSEP t; v = "vmapalloc" SUBSEP t
        ko = median(k, 1); vo = median(v, 1); kh = median(k, 2); vh = median(v, 2)
        kf = median(k, 3); vf = median(v, 3)
        ratio = ko > 0 ? vo / ko : 0; diff = vh - kh
        ok = ratio >= 2 && diff <= lazy_kib
        if (!ok) met = 0
        printf "%7d %13.0f %13.0f %6.2fx %9.1fMi %9.1fMi %+8.1fMi %12.0f %12.0f  %s\n", t, ko, vo, ratio,
            kh / 1024, vh / 1024, diff / 1024, kf, vf,
            ok ? "met" : (ratio < 2 ? "MISSED (ratio < 2)" : "MISSED (RSS > kernel + LAZY_MAX)")
    }
    printf "goal (ratio >= 2x and RSS within %.0f MiB of the kernel at every thread count): %s\n",
        lazy_kib / 1024, met ? "met" : "MISSED"
    exit met ? 0 : 3
}' "$tmp/runs"
st=$?
if [ "$st" -eq 3 ]; then
    [ "$check" -eq 1 ] && exit 1
    exit 0
fi
exit "$st"

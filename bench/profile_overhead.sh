#!/usr/bin/env bash
# profile_overhead.sh — what VMAPALLOC_PROFILE=1 costs (goals: < 5% on
# small-allocation workloads, < 2% on large ones).
#
#   bench/profile_overhead.sh [BUILD_DIR]        (default: build)
#
# Workloads, each run with VMAPALLOC_PROFILE=0 and =1 under the same preload,
# the two interleaved (off/on, then on/off, ...) REPEATS times; the figure is
# the median of the workload's own timing of its loop:
#   small     bench/profile_small.c: SMALL_OPS x (free one of 256 live blocks,
#             malloc 16..4096 random bytes) — glibc serves them, the profile
#             samples one in about 512 KiB
#   fix64     bench/large --shape fix_size_64 --touch page: malloc(256 KiB),
#             touch, verify, free — every block is recorded with a backtrace
#   random    bench/large --shape random --touch page (64 KiB..4 MiB blocks)
# Wall time on a shared machine is noisy, so with valgrind installed the same
# workloads (fewer operations) are also counted in instructions per operation
# with callgrind, which does not depend on the neighbours (CALLGRIND=0 skips
# it).  Instructions do not count the kernel's time (page faults, madvise),
# which is most of the random shape's.
#
# Environment: REPEATS (5), SMALL_OPS (10000000), FIX_OPS (300000),
# RANDOM_OPS (3000), CALLGRIND (1).
set -euo pipefail
cd "$(dirname -- "$0")/.."
build=${1:-build}
lib=$PWD/$build/preload/libvmapalloc.so
large=$PWD/$build/bench/large
REPEATS=${REPEATS:-5}
SMALL_OPS=${SMALL_OPS:-10000000}
FIX_OPS=${FIX_OPS:-300000}
RANDOM_OPS=${RANDOM_OPS:-3000}
CALLGRIND=${CALLGRIND:-1}
[[ -r $lib && -x $large ]] || { echo "profile_overhead: build first (meson compile -C $build)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=$tmp/profile_small
cc -O2 -fno-builtin -o "$small" bench/profile_small.c

# cmd WORKLOAD OPS: the command line of one run.
cmd() {
    case $1 in
    small) echo "$small $2" ;;
    fix64) echo "$large --shape fix_size_64 --touch page --ops $2" ;;
    random) echo "$large --shape random --touch page --ops $2 --seed 7" ;;
    esac
}
ops_of() {
    case $1 in small) echo "$SMALL_OPS" ;; fix64) echo "$FIX_OPS" ;; random) echo "$RANDOM_OPS" ;; esac
}

# run WORKLOAD PROFILE: seconds of the timed loop (the report that
# VMAPALLOC_PROFILE=1 prints on stderr is dropped).
run() {
    local out
    # shellcheck disable=SC2046
    out=$(env LD_PRELOAD="$lib" VMAPALLOC_PROFILE="$2" $(cmd "$1" "$(ops_of "$1")") 2>/dev/null)
    sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<< "$out"
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# ir WORKLOAD PROFILE OPS: instructions counted by callgrind.
ir() {
    # shellcheck disable=SC2046
    # PURGE_DELAY_MS=0: purges by size only, so that valgrind's slowness does
    # not change which purges happen.
    env LD_PRELOAD="$lib" VMAPALLOC_PROFILE="$2" VMAPALLOC_PURGE_DELAY_MS=0 valgrind --tool=callgrind \
        --callgrind-out-file=/dev/null $(cmd "$1" "$3") 2>&1 >/dev/null |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

pct() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%+.1f%%", (b - a) * 100 / a}'; }

printf '%-8s %-26s %12s %12s %10s %6s\n' workload "(median of $REPEATS, s)" PROFILE=0 PROFILE=1 overhead goal
for w in small fix64 random; do
    : > "$tmp/off"; : > "$tmp/on"
    for ((r = 0; r < REPEATS; r++)); do
        if ((r % 2 == 0)); then
            run $w 0 >> "$tmp/off"; run $w 1 >> "$tmp/on"
        else
            run $w 1 >> "$tmp/on"; run $w 0 >> "$tmp/off"
        fi
    done
    off=$(median < "$tmp/off") on=$(median < "$tmp/on")
    goal=$([[ $w == small ]] && echo "<5%" || echo "<2%")
    printf '%-8s %-26s %12s %12s %10s %6s\n' "$w" "$(ops_of $w) ops" "$off" "$on" "$(pct "$off" "$on")" "$goal"
    echo "         runs off: $(tr '\n' ' ' < "$tmp/off")  on: $(tr '\n' ' ' < "$tmp/on")"
done

if [[ $CALLGRIND == 1 ]] && command -v valgrind > /dev/null; then
    # Per operation: (instructions at 2N ops - at N ops) / N, so that start-up
    # and the exit report (libunwind's first parse of the unwind tables, the
    # symbolization: ~0.5-0.8 M instructions once) are not spread over the loop.
    echo
    printf '%-8s %-26s %14s %14s %10s\n' workload "(callgrind, instr./op)" PROFILE=0 PROFILE=1 overhead
    for w in small:500000 fix64:10000 random:150; do
        name=${w%%:*} n=${w##*:}
        a1=$(ir "$name" 0 "$n") a2=$(ir "$name" 0 $((2 * n)))
        b1=$(ir "$name" 1 "$n") b2=$(ir "$name" 1 $((2 * n)))
        a=$(awk -v x="$a1" -v y="$a2" -v n="$n" 'BEGIN {printf "%.1f", (y - x) / n}')
        b=$(awk -v x="$b1" -v y="$b2" -v n="$n" 'BEGIN {printf "%.1f", (y - x) / n}')
        printf '%-8s %-26s %14s %14s %10s\n' "$name" "$n -> $((2 * n)) ops" "$a" "$b" "$(pct "$a" "$b")"
    done
fi

#!/bin/sh
# tests/fuzz/run.sh SECONDS [OUTDIR] — builds the fuzzers and runs each one.
#
#   range      fuzz_range, the default configuration (RESERVE=1G, SHARDS=2,
#              LAZY_MAX=32M, PURGE_DELAY_MS=1, caches on)            SECONDS
#   range-alt  fuzz_range with PURGE_ADVICE=free, HUGEPAGE=0, CACHE=0,
#              POOL_PAGES=8, SHARDS=3, RESERVE=256M (regions added often) SECONDS/2
#   slab       fuzz_slab, VMAPALLOC_BACKEND=builtin (the target's defaults:
#              RESERVE=1G, SHARDS=2, PURGE_DELAY_MS=1)                  SECONDS
#   options    fuzz_options with tests/fuzz/options.dict               SECONDS/2
#              (a parser: it finds its coverage in seconds)
#
# Each run starts from the committed seeds (tests/fuzz/corpus/<target>) plus
# what earlier runs in OUTDIR found (OUTDIR/work/<run>, never committed).
# A failure leaves OUTDIR/artifacts/<run>/crash-* and prints how to replay it.
# Appends "executions <run> N" lines to OUTDIR/fuzz-stats.txt.
# fuzz_range and fuzz_slab run in libFuzzer's fork mode (-fork=1: a fresh
# child process every few seconds), because the arena keeps every chunk it
# ever claimed and the debug model check after each operation walks them all:
# one long-lived process slows down as it accumulates chunks.
# Meson test 'fuzz-short' runs this for 20 s; scripts/reliability fuzz-long N for N minutes.
set -u

secs=${1:?usage: run.sh SECONDS [OUTDIR]}
here=$(cd "$(dirname -- "$0")" && pwd)
out=${2:-$here/../../build-fuzz}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)

"$here/build.sh" "$out" || { echo "run.sh: FAIL: the fuzzers do not build"; exit 1; }

half=$((secs / 2))
[ "$half" -ge 1 ] || half=1
fails=0
total=0

run() {
    # $1 run name, $2 binary, $3 seeds dir, $4 seconds; then env assignments
    name=$1 bin=$2 seeds=$3 t=$4
    shift 4
    mkdir -p "$out/work/$name" "$out/artifacts/$name"
    log="$out/$name.log"
    mode=-fork=1
    [ "$name" = options ] && mode="-dict=$here/options.dict"
    echo "run.sh: $name: $t s ($*)"
    # Only VMAPALLOC_* settings reach the core; fuzz_range applies them over its defaults.
    # shellcheck disable=SC2086
    env "$@" "$out/$bin" -max_total_time="$t" -timeout=30 -rss_limit_mb=3072 \
        -print_final_stats=1 -artifact_prefix="$out/artifacts/$name/" $mode \
        "$out/work/$name" "$seeds" >"$log" 2>&1
    rc=$?
    # In-process: the final stats line; fork mode: the parent's last "#N:" line.
    n=$(sed -n -e 's/^stat::number_of_executed_units: *//p' -e 's/^#\([0-9]*\): cov.*/\1/p' "$log" |
        sort -n | tail -n 1)
    n=${n:-0}
    total=$((total + n))
    echo "executions $name $n" >>"$out/fuzz-stats.txt"
    if [ "$rc" -ne 0 ]; then
        fails=$((fails + 1))
        echo "run.sh: FAIL: $name exited $rc after $n executions; the end of $log:"
        tail -n 40 "$log" | sed 's/^/  | /'
        for a in "$out/artifacts/$name"/*; do
            [ -f "$a" ] && echo "  replay: env $* $out/$bin $a"
        done
    else
        echo "run.sh: ok: $name: $n executions, $(ls "$out/work/$name" | wc -l) new units in $out/work/$name"
    fi
}

run range fuzz_range "$here/corpus/range" "$secs"
run range-alt fuzz_range "$here/corpus/range" "$half" \
    VMAPALLOC_PURGE_ADVICE=free VMAPALLOC_HUGEPAGE=0 VMAPALLOC_CACHE=0 \
    VMAPALLOC_POOL_PAGES=8 VMAPALLOC_SHARDS=3 VMAPALLOC_RESERVE=256M
run slab fuzz_slab "$here/corpus/slab" "$secs"
run options fuzz_options "$here/corpus/options" "$half"

echo "run.sh: $total executions (inputs tried) in all, $fails failure(s)"
[ "$fails" -eq 0 ]

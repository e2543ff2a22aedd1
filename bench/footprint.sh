#!/usr/bin/env bash
# bench/footprint.sh — what a preloaded allocator costs a minimal process in
# memory: VmRSS, RssAnon, VmPTE (page tables), VmSize and the number
# of mappings, read from /proc/PID/status and /proc/PID/maps while the process
# sleeps, under no preload, vmapalloc, mimalloc, jemalloc and tcmalloc.
#
# Processes (each waits in a known system call, which is how the script knows
# it has finished starting: /proc/PID/syscall):
#   sleep        `sleep 1000` (clock_nanosleep)
#   tiny         `bench/tiny pause`: no allocation at all (pause)
#   tiny-alloc   `bench/tiny alloc-pause`: 100 allocations of 16 B..128 KiB
#                and their frees first (pause)
# Every figure is the median of REPEATS starts (default 3).
#
# Goal: vmapalloc's footprint no larger than the smallest of
# mimalloc's, jemalloc's and tcmalloc's.
#
#   bench/footprint.sh [-r REPEATS] [--vmapalloc LIB] [--tiny PATH] [--out FILE]
#                      [--extra NAME=LIB[:LIB]]...   (more columns, not in the goal)
set -euo pipefail

cmdline="$*"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
libdir=/usr/lib/x86_64-linux-gnu
repeats=3
vmapalloc=$root/build/preload/libvmapalloc.so
tiny=$root/build/bench/tiny
outfile=
extras=()

while (($#)); do
    case $1 in
    -r) repeats=$2; shift 2 ;;
    --vmapalloc) vmapalloc=$2; shift 2 ;;
    --tiny) tiny=$2; shift 2 ;;
    --out) outfile=$2; shift 2 ;;
    --extra) extras+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "footprint: unknown argument $1" >&2; exit 2 ;;
    esac
done

[[ -x $tiny ]] || { echo "footprint: $tiny is missing (meson compile -C build tiny)" >&2; exit 2; }

names=(none vmapalloc mimalloc jemalloc tcmalloc)
declare -A lib=(
    [none]=""
    [vmapalloc]=$vmapalloc
    [mimalloc]=$libdir/libmimalloc.so.2
    [jemalloc]=$libdir/libjemalloc.so.2
    [tcmalloc]=$libdir/libtcmalloc_minimal.so.4
)
for e in "${extras[@]}"; do
    n=${e%%=*} l=${e#*=}
    if [[ $n == "$e" || -z $n || -z $l || -n ${lib[$n]+x} ]]; then
        echo "footprint: bad --extra $e (NAME=LIB[:LIB], a new name)" >&2
        exit 2
    fi
    names+=("$n")
    lib[$n]=$l
done
procs=(sleep tiny tiny-alloc)
declare -A cmd=(
    [sleep]="sleep 1000"
    [tiny]="$tiny pause"
    [tiny-alloc]="$tiny alloc-pause"
)
declare -A waits_in=([sleep]=230 [tiny]=34 [tiny-alloc]=34) # clock_nanosleep, pause

present=()
for n in "${names[@]}"; do
    missing=
    IFS=: read -r -a parts <<<"${lib[$n]}"
    for l in "${parts[@]}"; do
        [[ -e $l ]] || missing+=" $l"
    done
    if [[ -n $missing ]]; then
        echo "footprint: $n:$missing not found, skipped" >&2
        continue
    fi
    present+=("$n")
done

# One start: prints "rss anon pte size maps" in KiB (maps: a count).
measure() {
    local preload=$1 proc=$2 pid nr i
    # shellcheck disable=SC2086
    env -u LD_PRELOAD ${preload:+LD_PRELOAD=$preload} ${cmd[$proc]} >/dev/null &
    pid=$!
    for ((i = 0; i < 1000; i++)); do
        nr=
        read -r nr _ <"/proc/$pid/syscall" 2>/dev/null || true
        # the right system call, and the right program (env has exec'd)
        if [[ $nr == "${waits_in[$proc]}" ]] && [[ $(readlink "/proc/$pid/exe") != */env ]]; then
            break
        fi
        sleep 0.005
    done
    if [[ $nr != "${waits_in[$proc]}" ]]; then
        kill "$pid" 2>/dev/null || true
        echo "footprint: $proc under '${preload:-none}' never reached its wait" >&2
        return 1
    fi
    local l parts
    IFS=: read -r -a parts <<<"$preload"
    for l in "${parts[@]}"; do
        if ! grep -qF "$(readlink -f "$l")" "/proc/$pid/maps"; then
            kill "$pid" 2>/dev/null || true
            echo "footprint: $l is not mapped into $proc" >&2
            return 1
        fi
    done
    awk -v maps="$(wc -l <"/proc/$pid/maps")" '
        /^VmRSS:/ {rss = $2} /^RssAnon:/ {anon = $2} /^VmPTE:/ {pte = $2} /^VmSize:/ {size = $2}
        END {print rss, anon, pte, size, maps}' "/proc/$pid/status"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

declare -A res
for proc in "${procs[@]}"; do
    for n in "${present[@]}"; do
        samples=()
        for ((r = 0; r < repeats; r++)); do
            samples+=("$(measure "${lib[$n]}" "$proc")")
        done
        row=
        for col in 1 2 3 4 5; do
            row+=" $(printf '%s\n' "${samples[@]}" | awk -v c=$col '{print $c}' | median)"
        done
        res[$proc,$n]=$row
    done
done

report() {
    echo "# Footprint of a minimal process (median of $repeats starts)"
    echo
    echo "- command: \`bench/footprint.sh $cmdline\`; kernel $(uname -r)"
    for n in "${present[@]}"; do
        [[ -n ${lib[$n]} ]] && echo "- $n: \`${lib[$n]}\`"
    done
    echo
    echo "| process | allocator | VmRSS KiB | RssAnon KiB | VmPTE KiB | VmSize KiB | mappings |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    for proc in "${procs[@]}"; do
        for n in "${present[@]}"; do
            read -r rss anon pte size maps <<<"${res[$proc,$n]}"
            echo "| $proc | $n | $rss | $anon | $pte | $size | $maps |"
        done
    done
    echo
    echo "## goal: vmapalloc <= the smallest of mimalloc, jemalloc, tcmalloc"
    echo
    echo "| process | figure | vmapalloc | smallest other | met |"
    echo "|---|---|---:|---:|---|"
    local all=yes
    for proc in "${procs[@]}"; do
        [[ -n ${res[$proc,vmapalloc]:-} ]] || continue
        read -r -a v <<<"${res[$proc,vmapalloc]}"
        local col=0
        for fig in VmRSS RssAnon VmPTE VmSize mappings; do
            local best='' who=''
            for n in mimalloc jemalloc tcmalloc; do
                [[ -n ${res[$proc,$n]:-} ]] || continue
                read -r -a o <<<"${res[$proc,$n]}"
                if [[ -z $best ]] || awk -v a="${o[$col]}" -v b="$best" 'BEGIN {exit !(a < b)}'; then
                    best=${o[$col]} who=$n
                fi
            done
            local met=yes
            awk -v a="${v[$col]}" -v b="$best" 'BEGIN {exit !(a <= b)}' || met=NO
            [[ $met == yes ]] || all=no
            echo "| $proc | $fig | ${v[$col]} | $best ($who) | $met |"
            col=$((col + 1))
        done
    done
    echo
    echo "goal met on every figure: $all"
}

if [[ -n $outfile ]]; then
    mkdir -p "$(dirname "$outfile")"
    report | tee "$outfile"
else
    report
fi

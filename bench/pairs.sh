#!/usr/bin/env bash
# bench/pairs.sh — instructions per small malloc/free pair (callgrind: the same
# count run after run, unlike wall time on a shared 2-CPU machine) under no
# preload (glibc), vmapalloc, mimalloc, jemalloc and tcmalloc, for the
# patterns of bench/pairs.c:
#   lifo-4096   malloc(4096), write, free            (bench/large's fix_size_1)
#   lifo-64     the same with 64 bytes
#   fifo-4096   64 live 4 KiB blocks, oldest freed first
#   random      one of 256 live blocks of 16..4096 bytes freed and replaced
# Each figure is (instructions of a run with 300 000 pairs - one with 100 000)
# / 200 000, the program's own loop included (about 12 instructions).
#
#   bench/pairs.sh [--vmapalloc LIB] [--extra NAME=LIB]... [--patterns LIST]
#   bench/pairs.sh --backends [...]   VMAPALLOC_BACKEND=libc beside glibc alone and
#                                     =mimalloc beside mimalloc alone; the last
#                                     columns: the instructions vmapalloc adds
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
libdir=/usr/lib/x86_64-linux-gnu
vmapalloc=$root/build/preload/libvmapalloc.so
patterns="lifo-4096 lifo-64 fifo-4096 random"
extras=()
backends=0
while (($#)); do
    case $1 in
    --vmapalloc) vmapalloc=$2; shift 2 ;;
    --extra) extras+=("$2"); shift 2 ;;
    --patterns) patterns=${2//,/ }; shift 2 ;;
    --backends) backends=1; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "pairs: unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null || { echo "pairs: valgrind is needed" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -fno-builtin -o "$tmp/pairs" "$here/pairs.c"

names=(glibc vmapalloc mimalloc jemalloc tcmalloc)
libs=("" "$vmapalloc" "$libdir/libmimalloc.so.2" "$libdir/libjemalloc.so.2"
      "$libdir/libtcmalloc_minimal.so.4")
backend=("" "" "" "" "")
if ((backends)); then
    names=(glibc vmapalloc-libc mimalloc vmapalloc-mimalloc)
    libs=("" "$vmapalloc" "$libdir/libmimalloc.so.2" "$vmapalloc")
    backend=("" libc "" mimalloc)
fi
for e in "${extras[@]}"; do
    names+=("${e%%=*}")
    libs+=("${e#*=}")
    backend+=("")
done

# instructions of one run: every process callgrind followed, summed
count() { # lib backend mode n size
    local out=$tmp/cg
    rm -rf "$out"; mkdir "$out"
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$out/cg.%p" \
        env ${1:+LD_PRELOAD=$1} ${2:+VMAPALLOC_BACKEND=$2} "$tmp/pairs" "$3" "$4" "$5" \
        >/dev/null 2>"$tmp/err" ||
        { echo "pairs: run failed: $3 $4 $5 under ${1:-glibc}" >&2; cat "$tmp/err" >&2; exit 1; }
    if grep '^vmapalloc: VMAPALLOC_BACKEND=' "$tmp/err" >&2; then
        echo "pairs: backend $2 not used" >&2; exit 1
    fi
    cat "$out"/cg.* | awk '/^totals:/ { s += $2 } END { print s }'
}

printf '| pattern |'
for n in "${names[@]}"; do printf ' %s |' "$n"; done
if ((backends)); then
    printf ' libc: added | mimalloc: added |\n|---|'
    for _ in "${names[@]}"; do printf -- '---:|'; done
    printf -- '---:|---:|\n'
else
    printf ' vmapalloc / best other |\n|---|'
    for _ in "${names[@]}"; do printf -- '---:|'; done
    printf -- '---:|\n'
fi
for p in $patterns; do
    mode=${p%%-*}
    size=${p#*-}
    [[ $mode == "$p" ]] && size=0
    printf '| %s |' "$p"
    best=0 mine=0 per_all=()
    for i in "${!names[@]}"; do
        a=$(count "${libs[$i]}" "${backend[$i]}" "$mode" 100000 "$size")
        b=$(count "${libs[$i]}" "${backend[$i]}" "$mode" 300000 "$size")
        per=$(( (b - a) / 200000 ))
        per_all+=("$per")
        printf ' %s |' "$per"
        if [[ ${names[$i]} == vmapalloc ]]; then
            mine=$per
        elif ((i < 5)) && ((best == 0 || per < best)); then
            best=$per
        fi
    done
    if ((backends)); then
        printf ' +%d | +%d |\n' $((per_all[1] - per_all[0])) $((per_all[3] - per_all[2]))
    else
        awk -v m="$mine" -v b="$best" 'BEGIN { printf " %.2fx |\n", m / b }'
    fi
done

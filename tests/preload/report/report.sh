#!/usr/bin/env bash
# report.sh SCENARIO PROGRAM CHECKER [LAUNCHER] — runs report_prog under
# LD_PRELOAD=$VMTEST_LIB with the report options of SCENARIO in a fresh
# directory, then check.py compares the reports with what the program did.
# VMTEST_KEEP=1 keeps the directory (its name is printed).
set -euo pipefail
scenario=$1 prog=$2 checker=$3 launcher=${4:-}
lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
d=$(mktemp -d "${TMPDIR:-/tmp}/vmapalloc-report.XXXXXX")
if [[ ${VMTEST_KEEP:-0} == 1 ]]; then echo "report.sh: keeping $d"; else trap 'rm -rf "$d"' EXIT; fi

json=(VMAPALLOC_STATS="$d/r-%p.json" VMAPALLOC_STATS_FORMAT=json)
# The exact large figures (the leak of 3 x 1 MiB) need every large block.
all=VMAPALLOC_PROFILE_LARGE_SAMPLE=0
# run ENV... -- MODE: the program with the preload, stdout to out.json, stderr to err.txt.
run() {
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" LD_PRELOAD="$lib" "$prog" "$@" > "$d/out.json" 2> "$d/err.txt"
}

check=$scenario
case $scenario in
basic|exit|fork)
    run "${json[@]}" VMAPALLOC_PROFILE=1 VMAPALLOC_PROFILE_SAMPLE=4K $all -- "$scenario" ;;
ownhandler)
    run "${json[@]}" VMAPALLOC_PROFILE=1 VMAPALLOC_PROFILE_SAMPLE=4K VMAPALLOC_STATS_SIGNAL=USR2 $all -- ownhandler ;;
signal)
    run "${json[@]}" VMAPALLOC_PROFILE=1 VMAPALLOC_STATS_SIGNAL=USR2 $all -- signal ;;
mmap)
    run "${json[@]}" VMAPALLOC_PROFILE=1 VMAPALLOC_MMAP=1 -- mmap ;;
sampling)
    run "${json[@]}" VMAPALLOC_PROFILE=1 VMAPALLOC_PROFILE_SAMPLE=64K -- sampling ;;
large_sampling)
    run "${json[@]}" VMAPALLOC_PROFILE=1 VMAPALLOC_PROFILE_LARGE_SAMPLE=1M -- large_sampling ;;
threads)
    run "${json[@]}" VMAPALLOC_PROFILE=1 VMAPALLOC_PROFILE_SAMPLE=16K VMAPALLOC_STATS_SIGNAL=USR2 -- threads ;;
api)
    run REPORT_DIR="$d" -- api ;;
launcher)
    env $all sh "$launcher" --library="$lib" --stats="$d/l-%p.json" --json --profile -- "$prog" basic \
        > "$d/out.json" 2> "$d/err.txt" ;;
text)
    run VMAPALLOC_STATS=1 VMAPALLOC_PROFILE=1 VMAPALLOC_PROFILE_SAMPLE=4K $all -- basic ;;
profile_only)
    # VMAPALLOC_PROFILE=1 alone: the report (with the sites) goes to stderr.
    run VMAPALLOC_PROFILE=1 VMAPALLOC_PROFILE_SAMPLE=4K $all -- basic
    check=text ;;
text_signal)
    run VMAPALLOC_STATS=1 VMAPALLOC_STATS_SIGNAL=USR2 -- signal ;;
symlink)
    # Planted: a link to an existing file and a dangling one at the report's name.
    echo "do not touch" > "$d/victim"
    ln -s "$d/victim" "$d/r-fixed.json"
    ln -s "$d/nowhere" "$d/r-dangling.json"
    run VMAPALLOC_STATS="$d/r-fixed.json" VMAPALLOC_STATS_FORMAT=json -- plain
    env VMAPALLOC_STATS="$d/r-dangling.json" LD_PRELOAD="$lib" "$prog" plain > /dev/null 2> "$d/err2.txt" ;;
*)
    echo "report.sh: unknown scenario $scenario" >&2; exit 2 ;;
esac

if ! /usr/bin/python3 "$checker" "$check" "$d"; then
    echo "--- files: $(ls "$d" | tr '\n' ' ')"
    echo "--- stdout:"; cat "$d/out.json"
    echo "--- stderr (first 60 lines):"; head -60 "$d/err.txt"
    exit 1
fi
echo "report.sh: $scenario ok"

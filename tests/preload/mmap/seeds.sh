#!/bin/sh
# seeds.sh DIFF_EXE LIB [N [FIRST]]
#
# Runs diff.c's random-vmas-dontunmap case with the seeds FIRST .. FIRST+N-1
# (default 1 .. 40), each without and with LD_PRELOAD=LIB, and counts the
# seeds whose transcripts differ.  For each such seed it prints the first
# differing line of each run, and the line before it in the plain run (the
# operation that made the state they disagree on is usually further back:
# rerun it with `DIFF_EXE --seed S --case random-vmas-dontunmap`).
#
# Last line: "seeds: N run, D differ".  Exit 0 when none differs, 1 otherwise,
# 99 on a set-up error.
set -u
[ $# -ge 2 ] || { echo "usage: seeds.sh DIFF_EXE LIB [N [FIRST]]"; exit 99; }
exe=$1 lib=$2 n=${3:-40} first=${4:-1}
[ -x "$exe" ] || { echo "ERROR: $exe is not an executable"; exit 99; }
[ -f "$lib" ] || { echo "ERROR: $lib does not exist"; exit 99; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
differ=0
s=$first
while [ "$s" -lt $((first + n)) ]; do
    env -u LD_PRELOAD "$exe" --seed "$s" --case random-vmas-dontunmap >"$tmp/plain" 2>&1
    env LD_PRELOAD="$lib" "$exe" --seed "$s" --case random-vmas-dontunmap >"$tmp/pre" 2>&1
    if ! cmp -s "$tmp/plain" "$tmp/pre"; then
        differ=$((differ + 1))
        line=$(cmp "$tmp/plain" "$tmp/pre" 2>/dev/null | sed -n 's/.* line \([0-9]*\).*/\1/p')
        [ -n "$line" ] || line=$(($(wc -l <"$tmp/plain") + 1))
        echo "seed $s: line $line"
        [ "$line" -gt 1 ] && echo "  before:  $(sed -n "$((line - 1))p" "$tmp/plain")"
        echo "  kernel:  $(sed -n "${line}p" "$tmp/plain")"
        echo "  preload: $(sed -n "${line}p" "$tmp/pre")"
    fi
    s=$((s + 1))
done
echo "seeds: $n run, $differ differ"
[ "$differ" -eq 0 ]

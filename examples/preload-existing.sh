#!/bin/sh
# Put vmapalloc in front of a program you cannot rebuild, and read the report.
# Usage: examples/preload-existing.sh [path/to/libvmapalloc.so]
set -eu
lib=$(realpath "${1:-$(dirname "$0")/../build/preload/libvmapalloc.so}")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
seq 1 2000000 | awk '{ print ($1 * 7919) % 1000003, $1 }' > "$tmp/in.txt"

# Same output, with and without vmapalloc; the report goes to stderr.
LD_PRELOAD=$lib VMAPALLOC_STATS=1 sort -n -S 256M "$tmp/in.txt" | sha256sum
sort -n -S 256M "$tmp/in.txt" | sha256sum

# Or write the report to a file per process (%p = pid, %e = program name), as JSON.
LD_PRELOAD=$lib VMAPALLOC_STATS="$tmp/report-%e-%p.json" VMAPALLOC_STATS_FORMAT=json \
	sort -n -S 256M "$tmp/in.txt" > /dev/null
cat "$tmp"/report-sort-*.json

#!/bin/bash
# system.sh CASE SYSMODES — vmapalloc under a system-wide memory setting,
# switched for one run and restored (root only; the tests are not parallel,
# so nothing else of the suite runs meanwhile).  VMTEST_LIB names
# libvmapalloc.so; SYSMODES is tests/reliability/sysmodes.c, which checks.
#
#   overcommit   vm.overcommit_memory=2 (strict): alloc/free rounds must not
#                grow Committed_AS, and the arena must exist (#29)
#   thp-always   transparent_hugepage/enabled=always: RSS back within
#                VMAPALLOC_LAZY_MAX after the purge delay (#31)
#   max-map      vm.max_map_count=4096: vmapalloc keeps what it adds under
#                half of it and the program keeps room for its own maps (#28)
#
# The same program runs without vmapalloc first (its figures are printed for
# comparison, and it must pass the same checks that do not need vmapalloc).
# Exit 77 (skipped) only where the setting cannot be written (not root).
set -uo pipefail
lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
case_=${1:?usage: system.sh CASE SYSMODES}
prog=${2:?usage: system.sh CASE SYSMODES}
env=()
case $case_ in
overcommit) file=/proc/sys/vm/overcommit_memory value=2 args=(commit 64) ;;
thp-always) file=/sys/kernel/mm/transparent_hugepage/enabled value=always args=(thp 200)
            env=(VMAPALLOC_PURGE_DELAY_MS=200 VMAPALLOC_LAZY_MAX=64M) ;;
max-map)    file=/proc/sys/vm/max_map_count value=4096 args=(maps 20000) ;;
*) echo "system.sh: unknown case $case_"; exit 2 ;;
esac
if [[ ! -w $file ]]; then
    echo "system.sh: $file cannot be written here (needs root): $case_ not run"
    exit 77
fi
old=$(sed 's/.*\[\(.*\)\].*/\1/' "$file")   # "always [madvise] never" -> madvise
restore() { echo "$old" >"$file" || echo "system.sh: could not restore $file to $old"; }
trap restore EXIT
echo "$value" >"$file" || { echo "system.sh: could not set $file to $value"; exit 1; }
echo "system.sh: $file = $(cat "$file") (was $old)"
ulimit -c 0 2>/dev/null
rc=0
if [[ $case_ != thp-always ]]; then
    echo "-- without vmapalloc"
    timeout -k 5 300 env -u LD_PRELOAD "$prog" "${args[@]}" | sed 's/^/  | /'
fi
echo "-- under vmapalloc"
timeout -k 5 300 env "${env[@]}" LD_PRELOAD="$lib" "$prog" "${args[@]}" 2>&1 | sed 's/^/  | /'
st=${PIPESTATUS[0]}
[[ $st -eq 0 ]] || { echo "FAIL: $case_ under vmapalloc: status $st"; rc=1; }
exit $rc

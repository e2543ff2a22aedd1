#!/usr/bin/env bash
# VMAPALLOC_GUARD=1: a write 1..4096 bytes past the usable end of a large
# block (small area from a pool, or a big THP-chunk area) dies of SIGSEGV;
# without the option the same write lands in the guard gap, harmlessly.
set -uo pipefail
lib=${VMTEST_LIB:?}
prog=${1:?overflow program}
unset VMTEST_LIB
fails=0
for n in 100000 3000000; do
	for past in 1 8 4096; do
		env VMAPALLOC_GUARD=1 LD_PRELOAD="$lib" "$prog" "$n" "$past" >/dev/null 2>&1
		rc=$?
		if [ "$rc" -eq 139 ]; then echo "ok   GUARD=1 n=$n past=$past: SIGSEGV"
		else echo "FAIL GUARD=1 n=$n past=$past: exit $rc, expected SIGSEGV (139)"; fails=$((fails + 1)); fi
	done
	out=$(env LD_PRELOAD="$lib" "$prog" "$n" 1 2>&1)
	if [ "$out" = "no trap" ]; then echo "ok   GUARD=0 n=$n: the gap absorbs the write"
	else echo "FAIL GUARD=0 n=$n: $out"; fails=$((fails + 1)); fi
done
test "$fails" -eq 0

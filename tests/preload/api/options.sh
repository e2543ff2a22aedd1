#!/usr/bin/env bash
# The option table under LD_PRELOAD: HELP lists every option and exits 0,
# VERBOSE prints the effective values, a bad value or an unknown name gives
# exactly one line (variable, value, what is accepted / nearest name) and the
# program still runs with the default, and README's table matches options.def.
set -euo pipefail
lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
root=$(cd "$(dirname "$0")/../../.." && pwd)
unset VMTEST_LIB VMAPALLOC_LIB
fails=0
check() { # check DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
run() { env LD_PRELOAD="$lib" "$@"; }

names=$(sed -n 's/^X(\([A-Z_]*\),.*/\1/p' "$root/core/options.def")
help=$(run VMAPALLOC_HELP=1 /bin/true; echo "rc=$?")
check "HELP exits 0" grep -q '^rc=0$' <<<"$help"
for n in $names; do
	check "HELP lists VMAPALLOC_$n" grep -q "VMAPALLOC_$n=" <<<"$help"
done
check "HELP stops the program (echo never runs)" \
	test -z "$(run VMAPALLOC_HELP=1 /bin/echo ran 2>/dev/null | grep -v '^ \|^vmapalloc options')"

verbose=$(run VMAPALLOC_VERBOSE=1 VMAPALLOC_LAZY_MAX=16M /bin/true 2>&1)
check "VERBOSE shows an effective value" grep -q 'VMAPALLOC_LAZY_MAX=16M' <<<"$verbose"

bad=$(run VMAPALLOC_SMALL_MAX=12Q /bin/echo still-runs 2>&1)
check "bad value: program still runs" grep -q '^still-runs$' <<<"$bad"
check "bad value: exactly one diagnostic line" test "$(grep -c '^vmapalloc:' <<<"$bad")" -eq 1
check "bad value: names variable, value, accepted range, default" \
	grep -q 'VMAPALLOC_SMALL_MAX="12Q" is not accepted: expected a size .* using the default 64K' <<<"$bad"

for v in -1 99999999999999999999999 "" "$(printf 'x%.0s' {1..400})" 2T; do
	out=$(run VMAPALLOC_SHARDS="$v" /bin/true 2>&1)
	check "SHARDS='${v:0:20}' rejected in one line" test "$(grep -c 'VMAPALLOC_SHARDS=' <<<"$out")" -eq 1
done

unk=$(run VMAPALLOC_LAZYMAX=1M /bin/true 2>&1)
check "unknown name: suggests the nearest" grep -q 'unknown option VMAPALLOC_LAZYMAX=1M ignored; did you mean VMAPALLOC_LAZY_MAX?' <<<"$unk"

ok=$(run VMAPALLOC_PURGE_ADVICE=FREE VMAPALLOC_CACHE=off VMAPALLOC_RESERVE=1G /bin/true 2>&1)
check "accepted values print nothing" test -z "$ok"

check "README option table matches core/options.def" "$root/scripts/options-table" --check

echo "options: $fails failure(s)"
test "$fails" -eq 0

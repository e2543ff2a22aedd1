#!/usr/bin/env bash
# backend.sh API_BACKENDS LAUNCHER FAKE_MIMALLOC_DIR — the choice of the small
# backend from outside: the library needs only libc; the launcher's help lists
# the backends of this build; a backend that is not built in, or a mimalloc
# that cannot be used (a stand-in libmimalloc.so.2 without its functions),
# gives exactly one line and the default (auto), and the program runs; the
# report names the backend in use and counts what each small allocator served.
set -euo pipefail
lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
prog=$1 launcher=$2 fakedir=$3
unset VMTEST_LIB LD_LIBRARY_PATH
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # check DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
check "the library's only DT_NEEDED is libc.so.6 ($needed)" test "$needed" = "libc.so.6 "

help=$(sh "$launcher" --help)
built=$(grep -A1 -- '--backend=B' <<<"$help" | tail -1 | tr -d ' ')
check "launcher --help lists libc, builtin, auto ($built)" grep -q '^libc,builtin,auto' <<<"$built"

# The report of one run: JSON, and its backend and per-backend counts.
report() { # report FILE ENV... -- the JSON report of api_backends under ENV
	local out=$1
	shift
	env LD_PRELOAD="$lib" VMAPALLOC_STATS="$out" VMAPALLOC_STATS_FORMAT=json "$@" "$prog" \
		>"$tmp/stdout" 2>"$tmp/stderr"
}
field() { # field FILE PYTHON-EXPRESSION-ON-d
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

for b in libc builtin auto; do
	report "$tmp/$b.json" VMAPALLOC_BACKEND=$b
	check "$b: the report names the backend" test "$(field "$tmp/$b.json" 'd["backend"]')" = "$b"
	check "$b: nothing on stderr" test ! -s "$tmp/stderr"
done
check "libc: glibc served the small allocations" \
	test "$(field "$tmp/libc.json" 'd["small_backends"]["glibc"]["allocs"] > 10000 and d["small_backends"]["slabs"]["allocs"] == 0')" = True
check "builtin: the slabs did" \
	test "$(field "$tmp/builtin.json" 'd["small_backends"]["slabs"]["allocs"] > 10000 and d["small_backends"]["glibc"]["allocs"] < 100')" = True
check "the counters sum to the small allocations (builtin)" \
	test "$(field "$tmp/builtin.json" 'd["small_backends"]["slabs"]["frees"] == d["counters"]["small_slab_frees"]')" = True

# The stand-in libmimalloc.so.2, or a build without the backend: one line.
report "$tmp/fallback.json" VMAPALLOC_BACKEND=mimalloc VMTEST_BACKEND=auto LD_LIBRARY_PATH="$fakedir"
grep -v '^vmapalloc:' "$tmp/stderr" >&2 || true
check "unusable mimalloc: the program runs" grep -q 'checks ok' "$tmp/stdout"
check "unusable mimalloc: exactly one line" test "$(grep -c '^vmapalloc:' "$tmp/stderr")" -eq 1
if grep -q 'mimalloc' <<<"$built"; then
	check "unusable mimalloc: the line says why" \
		grep -q 'VMAPALLOC_BACKEND=mimalloc: .*libmimalloc.so.2 has no mi_malloc; using the default backend (auto)' "$tmp/stderr"
	check "unusable mimalloc: the default is used" test "$(field "$tmp/fallback.json" 'd["backend"]')" = auto

	report "$tmp/mimalloc.json" VMAPALLOC_BACKEND=mimalloc
	check "mimalloc: nothing on stderr" test ! -s "$tmp/stderr"
	check "mimalloc: the report names it" test "$(field "$tmp/mimalloc.json" 'd["backend"]')" = mimalloc
	check "mimalloc: it served the small allocations and holds memory" \
		test "$(field "$tmp/mimalloc.json" 'd["small_backends"]["mimalloc"]["allocs"] > 10000 and d["small_backends"]["mimalloc"]["committed_bytes"] > 0')" = True
	check "mimalloc: frees counted by owner" \
		test "$(field "$tmp/mimalloc.json" 'd["small_backends"]["mimalloc"]["frees"] > 10000 and d["small_backends"]["glibc"]["frees"] >= 3')" = True
	env LD_PRELOAD="$lib" VMAPALLOC_BACKEND=mimalloc VMAPALLOC_STATS=1 "$prog" >/dev/null 2>"$tmp/text"
	check "mimalloc: the text report's backend line" \
		grep -Eq '^  small backend +mimalloc: [0-9]+ / [0-9]+ \(.* committed, peak .*\), glibc [0-9]+ / [0-9]+' "$tmp/text"
else
	check "not built in: the line says so" \
		grep -q 'VMAPALLOC_BACKEND=mimalloc: this build has no mimalloc backend' "$tmp/stderr"
	check "not built in: the default is used" test "$(field "$tmp/fallback.json" 'd["backend"]')" = auto
fi

# Destructors that run after the program's atexit handlers free, read and
# allocate blocks; mimalloc's own exit handler (destroy-on-exit asked for)
# must come after them and the report, not before.
for b in auto mimalloc; do
	out=$(env LD_PRELOAD="$lib" VMAPALLOC_BACKEND=$b MIMALLOC_DESTROY_ON_EXIT=1 \
		VMAPALLOC_STATS="$tmp/exit-$b.txt" "$prog" exit 2>&1) || true
	check "$b: blocks freed and allocated by destructors at exit" grep -q '^late frees: ok$' <<<"$out"
done

echo "backend.sh: $fails failure(s)"
[ "$fails" -eq 0 ]

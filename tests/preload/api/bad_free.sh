#!/bin/sh
# bad_free.sh BAD_FREE_EXE — misuse of large blocks must abort with one line.
#
# Runs BAD_FREE_EXE under LD_PRELOAD=$VMTEST_LIB for each misuse case and
# asserts: killed by SIGABRT (status 134 from sh), stderr is exactly one
# newline-terminated line that starts with "vmapalloc: " and says
# "invalid pointer" or "double free".  The glibc-ptr case must exit 0 with an
# empty stderr; the foreign case (stack, static and code addresses freed) must
# exit 0 with exactly one such line, the count in the exit report; without
# the preload the program must refuse to run.
set -u

exe=${1:?usage: bad_free.sh BAD_FREE_EXE}
lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
[ -x "$exe" ] || { echo "FAIL: $exe is not executable"; exit 1; }
[ -f "$lib" ] || { echo "FAIL: VMTEST_LIB=$lib does not exist"; exit 1; }

ABORT_CASES="double-free double-free-aligned interior realloc-freed"
# The builtin small backend's own checks (run with VMAPALLOC_BACKEND=builtin).
SMALL_CASES="small-double-free small-double-free-remote small-interior small-realloc-freed small-never-given"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bad_free.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC3045  # dash and bash both have it; the program also sets RLIMIT_CORE
ulimit -c 0 2>/dev/null

checks=0
fails=0
fail() {
    fails=$((fails + 1))
    echo "FAIL: $1"
    if [ -s "$tmp/err" ]; then
        echo "  stderr was:"
        sed 's/^/  | /' "$tmp/err"
    fi
}
ok() { checks=$((checks + 1)); }

# Runs the program; sh reports death by signal N as status 128+N.  Only
# LD_PRELOAD is passed on: vmapalloc warns about unknown VMAPALLOC_* variables
# (VMTEST_LIB included), which would add lines to stderr.
run() {
    # $1 = case, $2 = LD_PRELOAD value
    # The subshell keeps sh's own "Aborted" notice out of the captured stderr.
    (env -u VMTEST_LIB LD_PRELOAD="$2" ${3:+VMAPALLOC_BACKEND=$3} "$exe" "$1" >"$tmp/out" \
        2>"$tmp/err" </dev/null) 2>/dev/null
}

for c in $ABORT_CASES $SMALL_CASES; do
    case $c in small-*) run "$c" "$lib" builtin ;; *) run "$c" "$lib" ;; esac
    st=$?
    if [ "$st" -eq 134 ]; then ok; else
        fail "$c: exit status $st, expected 134 (SIGABRT)"; continue
    fi
    nl=$(wc -l <"$tmp/err")                    # newline-terminated lines
    nr=$(awk 'END { print NR }' "$tmp/err")    # lines, terminated or not
    if [ "$nl" -eq 1 ] && [ "$nr" -eq 1 ]; then ok; else
        fail "$c: stderr has $nr line(s) ($nl newline-terminated), expected exactly one"; continue
    fi
    line=$(cat "$tmp/err")
    case $line in
        "vmapalloc: "*) ok ;;
        *) fail "$c: stderr line does not start with 'vmapalloc: '"; continue ;;
    esac
    case $line in
        *"invalid pointer"*|*"double free"*) ok ;;
        *) fail "$c: stderr line says neither 'invalid pointer' nor 'double free'"; continue ;;
    esac
    echo "ok: $c: $line"
done

run glibc-ptr "$lib"
st=$?
if [ "$st" -eq 0 ]; then ok; else fail "glibc-ptr: exit status $st, expected 0"; fi
if [ ! -s "$tmp/err" ]; then ok; else fail "glibc-ptr: unexpected stderr"; fi
[ "$st" -eq 0 ] && echo "ok: glibc-ptr: $(cat "$tmp/out")"

# Pointers that are nobody's (stack, static data, code): left alone, one line,
# counted (the program checks the counter; the report file must show it).
# The program's small blocks must be glibc's (or mimalloc's), not the slabs':
# under the builtin backend (meson test --setup builtin) it runs with auto.
foreign_backend=${VMAPALLOC_BACKEND:-auto}
[ "$foreign_backend" = builtin ] && foreign_backend=auto
run_foreign() {
    (env -u VMTEST_LIB LD_PRELOAD="$lib" VMAPALLOC_STATS="$tmp/report" \
        VMAPALLOC_BACKEND="$foreign_backend" "$exe" foreign \
        >"$tmp/out" 2>"$tmp/err" </dev/null) 2>/dev/null
}
run_foreign
st=$?
if [ "$st" -eq 0 ]; then ok; else fail "foreign: exit status $st, expected 0"; fi
nl=$(wc -l <"$tmp/err")
if [ "$nl" -eq 1 ] && grep -q '^vmapalloc: free(): invalid pointer 0x[0-9a-f]* (on this thread.s stack).*left alone' "$tmp/err"; then ok; else
    fail "foreign: expected exactly one line 'vmapalloc: free(): invalid pointer ... (on this thread's stack) ... left alone'"
fi
if grep -q 'foreign pointers left alone 7$' "$tmp/report" 2>/dev/null; then ok; else
    fail "foreign: the report does not say 'foreign pointers left alone 7'"
    sed 's/^/  | /' "$tmp/report" 2>/dev/null | head -n 12
fi
[ "$st" -eq 0 ] && echo "ok: foreign: $(cat "$tmp/out"); said: $(cat "$tmp/err")"

# Without the preload the program must refuse to run (exit 1, loud).
run double-free ""
st=$?
if [ "$st" -eq 1 ] && grep -q "not running under vmapalloc" "$tmp/err"; then ok; else
    fail "without the preload: status $st, expected 1 and 'not running under vmapalloc'"
fi

if [ "$fails" -ne 0 ]; then
    echo "bad_free.sh: $fails failure(s), $checks checks passed"
    exit 1
fi
echo "bad_free.sh: OK, $checks checks passed"
exit 0

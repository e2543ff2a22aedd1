#!/bin/sh
# bad_free.sh BAD_FREE_EXE — misuse of large blocks must abort with one line.
#
# Runs BAD_FREE_EXE under LD_PRELOAD=$VMTEST_LIB for each misuse case and
# asserts: killed by SIGABRT (status 134 from sh), stderr is exactly one
# newline-terminated line that starts with "vmapalloc: " and says
# "invalid pointer" or "double free".  The glibc-ptr and glibc-blocks cases
# must exit 0 with an empty stderr; the foreign case (a stack address freed)
# must meet the fate it meets without the preload (glibc's "free(): invalid
# pointer", SIGABRT) under every backend; without the preload the program
# must refuse to run.
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

# glibc's blocks: with the libc backend, whichever backend the tier runs
# under (with builtin, small blocks are not glibc's).
run glibc-blocks "$lib" libc
st=$?
if [ "$st" -eq 0 ]; then ok; else fail "glibc-blocks: exit status $st, expected 0"; fi
if [ ! -s "$tmp/err" ]; then ok; else fail "glibc-blocks: unexpected stderr"; fi
[ "$st" -eq 0 ] && echo "ok: glibc-blocks: $(cat "$tmp/out")"

# A pointer that is nobody's block (on the stack): the fate it meets without
# vmapalloc, under every backend -- glibc's free stops the program with its
# own message, and vmapalloc says nothing.
run foreign ""
want_st=$?
want_err=$(cat "$tmp/err")
if [ "$want_st" -eq 134 ] && [ "$want_err" = "free(): invalid pointer" ]; then ok; else
    fail "foreign without the preload: status $want_st, stderr '$want_err' (expected 134, glibc's line)"
fi
for backend in libc builtin auto; do
    run foreign "$lib" "$backend"
    st=$?
    err=$(cat "$tmp/err")
    if [ "$st" -eq "$want_st" ] && [ "$err" = "$want_err" ]; then ok; else
        fail "foreign ($backend): status $st, stderr '$err'; without vmapalloc: $want_st, '$want_err'"
        continue
    fi
    echo "ok: foreign ($backend): status $st, said: $err"
done

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

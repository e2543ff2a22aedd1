#!/bin/sh
# loading.sh CASE ARGS... — vmapalloc loaded the wrong way (reliability.md
# #30, #45): it must work, or degrade with at most one clear line, never crash.
# VMTEST_LIB names libvmapalloc.so.
#
#   dlopen DLOPEN_EXE     dlopen() of the library by a program that is not
#                         preloaded (RTLD_LOCAL, RTLD_GLOBAL, RTLD_DEEPBIND):
#                         exit 0, at most one stderr line; prints what it saw
#   asan ASAN_EXE         an ASan-built program under LD_PRELOAD: it runs, or
#                         ASan refuses with its own one-line message (status 1)
#                         — never a signal; the same with
#                         ASAN_OPTIONS=verify_asan_link_order=0 (ASan does not
#                         refuse, both allocators meet)
#   valgrind API_EXE...   each program under `valgrind --tool=none` (vmapalloc
#                         really runs under valgrind's JIT; valgrind refuses
#                         reservations >= 64 GiB, so the arena must back off)
#                         must pass; under memcheck (`--error-exitcode=1`),
#                         where valgrind's own malloc comes first and vmapalloc
#                         is bypassed, the run must end without a crash and
#                         without a memcheck error inside libvmapalloc.so
#                         (valgrind 3.19's own memalign panics on alignment
#                         2^63, which vmapalloc forwards to libc's memalign once
#                         its arena refused it: reported, not failed); prints
#                         what failed
set -u
lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
case_=${1:?usage: loading.sh CASE ARGS...}
shift
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vmap-loading.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
ulimit -c 0 2>/dev/null
fails=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }
show() { sed 's/^/  | /' "$tmp/out" "$tmp/err" | tail -n "${1:-12}"; }
signalled() { [ "$1" -gt 128 ] && [ "$1" -ne 124 ]; }

case $case_ in
dlopen)
    exe=$1
    for m in local global deepbind; do
        env -u LD_PRELOAD -u VMTEST_LIB "$exe" "$lib" $m >"$tmp/out" 2>"$tmp/err" </dev/null
        st=$?
        n=$(wc -l <"$tmp/err")
        if [ "$st" -ne 0 ]; then fail "dlopen $m: status $st"; show
        elif [ "$n" -gt 1 ]; then fail "dlopen $m: $n stderr lines"; show
        else echo "ok: $(cat "$tmp/out")$( [ "$n" -eq 1 ] && echo "; said: $(cat "$tmp/err")")"; fi
    done
    ;;
asan)
    exe=$1
    for opts in "" "verify_asan_link_order=0"; do
        env -u VMTEST_LIB LD_PRELOAD="$lib" ASAN_OPTIONS="$opts" "$exe" >"$tmp/out" 2>"$tmp/err" </dev/null
        st=$?
        what="ASan program with ASAN_OPTIONS='$opts'"
        if signalled "$st"; then
            fail "$what: killed by signal $((st - 128))"; show
        elif [ "$st" -eq 0 ]; then
            echo "ok: $what: ran ($(cat "$tmp/out")), stderr: $(wc -l <"$tmp/err") line(s)"
        elif [ "$st" -eq 1 ] && [ "$(wc -l <"$tmp/err")" -le 1 ] && grep -q 'ASan runtime does not come first' "$tmp/err"; then
            echo "ok: $what: ASan refused with one line: $(sed 's/^==[0-9]*==//' "$tmp/err")"
        else
            fail "$what: status $st"; show
        fi
    done
    ;;
valgrind)
    command -v valgrind >/dev/null 2>&1 || { echo "SKIP: valgrind not installed"; exit 77; }
    for exe in "$@"; do
        p=$(basename "$exe")
        env -u VMTEST_LIB LD_PRELOAD="$lib" timeout -k 5 1500 valgrind -q --tool=none "$exe" \
            >"$tmp/out" 2>"$tmp/err" </dev/null
        st=$?
        if [ "$st" -ne 0 ]; then fail "$p under valgrind --tool=none (vmapalloc active): status $st"; show
        else echo "ok: $p under valgrind --tool=none: vmapalloc active, passes: $(tail -n 1 "$tmp/out")"; fi
        env -u VMTEST_LIB LD_PRELOAD="$lib" VMTEST_KEEP_GOING=1 timeout -k 5 1500 \
            valgrind --error-exitcode=99 "$exe" >"$tmp/out" 2>"$tmp/err" </dev/null
        st=$?
        errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$tmp/err" | tail -n 1)
        inlib=$(grep -c 'libvmapalloc' "$tmp/err")
        nfail=$(grep -c '^FAIL: [^ ]*:[0-9]*:' "$tmp/err")
        if grep -q "the 'impossible' happened" "$tmp/err"; then
            # valgrind 3.19's own memalign panics on alignments it deems bad
            # (2^63) instead of failing the call.  vmapalloc passes such
            # requests, once its arena refused them, to libc's memalign, which
            # valgrind redirects to that code; glibc alone answers ENOMEM.
            if grep -q 'bad alignment value' "$tmp/err"; then
                echo "ok (valgrind's own panic): $p under memcheck: valgrind's memalign panicked on a request vmapalloc forwarded to libc's memalign: $(grep -m1 'VG_(arena_memalign)(' "$tmp/err")"
            else
                fail "$p under memcheck: valgrind panicked"; show 30
            fi
        elif signalled "$st" || [ "$st" -eq 124 ]; then
            fail "$p under memcheck: status $st"; show
        elif [ "${errs:-0}" -ne 0 ] && [ "$inlib" -gt 0 ]; then
            fail "$p under memcheck: $errs memcheck error(s), $inlib stack line(s) in libvmapalloc.so:"
            grep -B2 -A8 'libvmapalloc' "$tmp/err" | head -n 30 | sed 's/^/  | /'
        else
            echo "ok: $p under memcheck: status $st, ${errs:-?} memcheck error(s) (none in libvmapalloc.so), $nfail vmapalloc-specific check(s) failed (valgrind's malloc came first)"
            grep -m3 '^FAIL: [^ ]*:[0-9]*:' "$tmp/err" | sed 's/^/  | e.g. /'
        fi
    done
    ;;
*)
    echo "loading.sh: unknown case $case_"; exit 2 ;;
esac
[ "$fails" -eq 0 ] || { echo "loading.sh $case_: $fails failure(s)"; exit 1; }
echo "loading.sh $case_: OK"

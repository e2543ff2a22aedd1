#!/bin/sh
# loading.sh CASE ARGS... — vmapalloc loaded the wrong way (REQUIREMENTS.md
# #30, #45): it must work, or degrade with at most one clear line, never crash.
# VMTEST_LIB names libvmapalloc.so.
#
#   dlopen DLOPEN_EXE     dlopen() of the library by a program that is not
#                         preloaded (RTLD_LOCAL, RTLD_GLOBAL, RTLD_DEEPBIND):
#                         exit 0, exactly one stderr line, vmapalloc's saying
#                         it is loaded after libc.so.6 and off, and no arena
#                         reserved (its own malloc called through dlsym passes
#                         to glibc); prints what it saw
#   asan ASAN_EXE         an ASan-built program under LD_PRELOAD: ASan refuses
#                         with its own one-line message (status 1) — never a
#                         signal; with ASAN_OPTIONS=verify_asan_link_order=0
#                         (ASan does not refuse, vmapalloc's malloc comes
#                         first) it runs and vmapalloc says in one line that
#                         ASan does not check heap blocks
#   valgrind API_EXE...   each program under `valgrind --tool=none` (vmapalloc
#                         really runs under valgrind's JIT; valgrind refuses
#                         reservations >= 64 GiB, so the arena must back off)
#                         must pass, and vmapalloc says nothing about
#                         valgrind; under memcheck (`--error-exitcode=1`),
#                         where valgrind redirects every malloc, vmapalloc's
#                         included, the run must end without a crash, without
#                         a memcheck error inside libvmapalloc.so, with exactly
#                         one line from vmapalloc saying it is off, and with no
#                         exit report although VMAPALLOC_STATS=1 asks for one;
#                         the same for `valgrind --trace-children=yes env
#                         LD_PRELOAD=... /bin/true` (the preload set inside)
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
        elif [ "$n" -ne 1 ] || ! grep -q '^vmapalloc: loaded after libc.so.6 .* so it is off' "$tmp/err"; then
            fail "dlopen $m: $n stderr line(s), expected exactly vmapalloc's 'loaded after libc.so.6 ... so it is off'"; show
        elif ! grep -q 'arena regions 0;.*own malloc(8 MiB) owned 0' "$tmp/out"; then
            fail "dlopen $m: vmapalloc reserved an arena or served its own malloc while off"; show
        else echo "ok: $(cat "$tmp/out"); said: $(cat "$tmp/err")"; fi
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
        elif [ "$st" -eq 0 ] && [ -n "$opts" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
             grep -q '^vmapalloc: libasan.*ASan does not check heap blocks' "$tmp/err"; then
            echo "ok: $what: ran ($(cat "$tmp/out")), vmapalloc said: $(cat "$tmp/err")"
        elif [ "$st" -eq 0 ]; then
            fail "$what: ran, but stderr is not vmapalloc's one line about ASan"; show
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
        elif grep -q '^vmapalloc: .*valgrind' "$tmp/err"; then
            fail "$p under valgrind --tool=none: vmapalloc turned itself off"; show
        else echo "ok: $p under valgrind --tool=none: vmapalloc active, passes: $(tail -n 1 "$tmp/out")"; fi
        # (timeout runs without the preload: its own report would be counted)
        env -u VMTEST_LIB timeout -k 5 1500 env LD_PRELOAD="$lib" VMTEST_KEEP_GOING=1 \
            VMAPALLOC_STATS=1 valgrind --error-exitcode=99 "$exe" >"$tmp/out" 2>"$tmp/err" </dev/null
        st=$?
        said=$(grep -c '^vmapalloc: ' "$tmp/err")
        if [ "$said" -ne 1 ] || ! grep -q "^vmapalloc: valgrind's vgpreload_memcheck.* vmapalloc is off" "$tmp/err"; then
            fail "$p under memcheck: $said line(s) from vmapalloc, expected exactly one saying it is off"
            grep '^vmapalloc' "$tmp/err" | head -n 5 | sed 's/^/  | /'
        elif grep -q '^vmapalloc .* report at exit' "$tmp/err"; then
            fail "$p under memcheck: vmapalloc, off, still wrote its exit report"
        else echo "ok: $p under memcheck: said: $(grep '^vmapalloc: ' "$tmp/err")"; fi
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
    # The preload set inside valgrind (traced child): the same one line.
    env -u VMTEST_LIB -u LD_PRELOAD timeout -k 5 300 valgrind -q --trace-children=yes \
        env LD_PRELOAD="$lib" VMAPALLOC_STATS=1 /bin/true >"$tmp/out" 2>"$tmp/err" </dev/null
    st=$?
    if [ "$st" -ne 0 ]; then fail "valgrind env LD_PRELOAD=... /bin/true: status $st"; show
    elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q "^vmapalloc: valgrind's vgpreload_memcheck.* vmapalloc is off" "$tmp/err"; then
        fail "valgrind env LD_PRELOAD=... /bin/true: expected exactly vmapalloc's line saying it is off"; show
    else echo "ok: valgrind --trace-children=yes env LD_PRELOAD=... /bin/true: said: $(cat "$tmp/err")"; fi
    ;;
*)
    echo "loading.sh: unknown case $case_"; exit 2 ;;
esac
[ "$fails" -eq 0 ] || { echo "loading.sh $case_: $fails failure(s)"; exit 1; }
echo "loading.sh $case_: OK"

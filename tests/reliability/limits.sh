#!/bin/sh
# limits.sh CASE ARGS... — address-space and data limits, black box.
# VMTEST_LIB names libvmapalloc.so; the programs get only LD_PRELOAD.
#
#   as-api LIMIT CONTRACTS LIBC_INTERNAL THREADS_FORK
#       The preload API tier under `prlimit --as=LIMIT`.  Oracle (differential):
#       run each program under vmapalloc with VMTEST_KEEP_GOING=1; every check
#       that fails must also fail in glibc's own run under the same limit
#       (VMTEST_CONTRACT_ONLY=1, no preload) — except, when vmapalloc printed
#       that it could not reserve an arena (it backs off to glibc: allowed), the
#       checks that assume the arena (ownership, counters, the program break).
#       No crash, no hang, at most one line from vmapalloc on stderr.
#   as-exhaust EXHAUST LIMIT... exhaust fill / threads 8 under --as=LIMIT
#   data EXHAUST LIMIT...       exhaust fill / threads 4 under --data=LIMIT
#                               (both fills on CPU 0: see cross-shard)
#   cross-shard EXHAUST LIMIT   fill on CPU 0, free all, fill on CPU 1 under
#                               --as=LIMIT: the second fill must reach half
#                               of the first (address space is not kept by
#                               the shard that used it first)
#   setrlimit EXHAUST           RLIMIT_AS lowered by the program: until NULL,
#                               free, succeed again (both fills on CPU 0)
#   setrlimit-honoured EXHAUST  the same with REL_STRICT_AS=1 (#25: nothing
#                               committed past the lowered limit, which is
#                               the address space in use + 256 MiB: see
#                               exhaust.c)
#   headroom EXHAUST LIMIT      exhaust headroom under --as=LIMIT (#24: the
#                               arena's regions leave glibc room)
#   regions EXHAUST             VMAPALLOC_RESERVE=256M under --as=6G: the arena
#                               adds regions (>= 4) and allocations succeed
#                               until the system refuses, free, succeed again
set -u
lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
case_=${1:?usage: limits.sh CASE ARGS...}
shift
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vmap-limits.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
ulimit -c 0 2>/dev/null
fails=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }
bytes() { numfmt --from=iec "$1"; }

# run NAME TIMEOUT PRELOAD(0/1) LIMITARGS -- CMD...: status in $st, output in $tmp/NAME.{out,err}
run() {
    name=$1 to=$2 pre=$3 lim=$4
    shift 5
    pl=
    [ -n "$lim" ] && pl="prlimit $lim"
    if [ "$pre" = 1 ]; then
        # shellcheck disable=SC2086
        timeout -k 5 "$to" $pl env -u VMTEST_LIB LD_PRELOAD="$lib" "$@" \
            >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
    else
        # shellcheck disable=SC2086
        timeout -k 5 "$to" $pl env -u VMTEST_LIB -u LD_PRELOAD VMTEST_CONTRACT_ONLY=1 "$@" \
            >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
    fi
    st=$?
}

show() { sed 's/^/  | /' "$tmp/$1.out" "$tmp/$1.err" | tail -n "${2:-15}"; }

vmap_lines() { grep -c '^vmapalloc: ' "$tmp/$1.err"; }

# FAIL lines as "file:line", sorted.
fail_keys() { sed -n 's/^FAIL: \([^:]*:[0-9]*\):.*/\1/p' "$1" | sort -u; }
# Those whose check needs the arena: ownership, counters, the program break.
ARENA_RE='vm\.owns|CTR\(|owne[dr]|ownership|brk|program break|counter|large_|not large|large alloc|large block|go to vmapalloc'
arena_keys() { grep '^FAIL: ' "$1" | grep -E "$ARENA_RE" |
               sed -n 's/^FAIL: \([^:]*:[0-9]*\):.*/\1/p' | sort -u; }
# Ownership checks a block that glibc served (owns=0): under a finite
# RLIMIT_AS that is the arena's designed fallback for what it cannot fit and
# still leave glibc its headroom (#24) -- a 1 GiB-aligned block under 8G, when
# the glibc arenas that threads made under load have grown VmSize.
glibc_served_keys() { grep '^FAIL: ' "$1" | grep 'ownership (owns=0)' |
                      sed -n 's/^FAIL: \([^:]*:[0-9]*\):.*/\1/p' | sort -u; }

case $case_ in
as-api)
    limit=$1
    shift
    for prog in "$@"; do
        p=$(basename "$prog")
        # Keep going after a failed check, except in threads_fork (its threads
        # would then use the NULL they were refused).
        kg=1
        case $p in *threads_fork*) kg=0 ;; esac
        run "$p" 600 1 "--as=$(bytes "$limit")" -- VMTEST_KEEP_GOING=$kg "$prog"
        vst=$st
        if [ "$vst" -gt 1 ]; then
            fail "$p under --as=$limit: status $vst (crash or hang; 124 = timeout)"; show "$p"; continue
        fi
        n=$(vmap_lines "$p")
        if [ "$n" -gt 1 ]; then fail "$p under --as=$limit: $n vmapalloc lines on stderr"; show "$p"; fi
        backed_off=0
        grep -q 'could not reserve an arena' "$tmp/$p.err" && backed_off=1
        note=
        [ $backed_off = 1 ] && note=" (vmapalloc backed off: no arena, glibc serves everything)"
        if [ "$vst" -eq 0 ]; then
            echo "ok: $p under --as=$limit: passes$note"
            continue
        fi
        run "$p.glibc" 600 0 "--as=$(bytes "$limit")" -- VMTEST_KEEP_GOING=$kg "$prog"
        gst=$st
        fail_keys "$tmp/$p.err" >"$tmp/v"
        fail_keys "$tmp/$p.glibc.err" >"$tmp/g"
        glibc_served_keys "$tmp/$p.err" >"$tmp/a"
        [ $backed_off = 1 ] && arena_keys "$tmp/$p.err" >>"$tmp/a"
        sort -u -o "$tmp/a" "$tmp/a"
        if [ $kg = 0 ] && [ $backed_off = 1 ] && grep -m1 '^FAIL' "$tmp/$p.err" | grep -qE "$ARENA_RE"; then
            echo "ok: $p under --as=$limit: its first failed check needs the arena$note:"
            grep -m1 '^FAIL' "$tmp/$p.err" | sed 's/^/  | /'
            continue
        fi
        if [ $kg = 0 ] && [ "$gst" -ne 0 ]; then
            echo "ok: $p under --as=$limit: fails with glibc alone too$note:"
            grep -m1 '^FAIL' "$tmp/$p.glibc.err" | sed 's/^/  | glibc:     /'
            grep -m1 '^FAIL' "$tmp/$p.err" | sed 's/^/  | vmapalloc: /'
            continue
        fi
        extra=$(comm -23 "$tmp/v" "$tmp/g" | comm -23 - "$tmp/a")
        if [ -n "$extra" ]; then
            fail "$p under --as=$limit fails checks that glibc alone passes (glibc status $gst)$note:"
            for k in $extra; do grep -m1 "^FAIL: $k:" "$tmp/$p.err" | sed 's/^/  | /'; done
        else
            echo "ok: $p under --as=$limit: $(wc -l <"$tmp/v") failed check(s), each failing with glibc alone too, needing the arena, or a block glibc served under the limit$note"
            for k in $(glibc_served_keys "$tmp/$p.err"); do grep -m1 "^FAIL: $k:" "$tmp/$p.err" | sed 's/^/  | served by glibc: /'; done
        fi
    done
    ;;
as-exhaust|data)
    exe=$1
    shift
    kind=as modes="fill|threads 8"
    [ "$case_" = data ] && kind=data modes="fill|threads 4"
    for limit in "$@"; do
        IFS='|'
        for mode in $modes; do
            IFS=' '
            # shellcheck disable=SC2086
            run ex 600 1 "--$kind=$(bytes "$limit")" -- REL_FIRST_CPU=0 REL_SECOND_CPU=0 "$exe" $mode
            if [ "$st" -ne 0 ]; then fail "exhaust $mode under --$kind=$limit: status $st"; show ex; else
                echo "ok: --$kind=$limit: $(grep '^exhaust ' "$tmp/ex.out" | head -n 1)$(grep -q 'could not reserve' "$tmp/ex.err" && echo ' [arena off]')"; fi
            n=$(vmap_lines ex)
            [ "$n" -le 1 ] || { fail "exhaust $mode under --$kind=$limit: $n vmapalloc lines"; show ex; }
            IFS='|'
        done
        IFS=' '
    done
    ;;
cross-shard)
    exe=$1 limit=$2
    if [ "$(nproc)" -lt 2 ]; then echo "SKIP: one CPU"; exit 77; fi
    run ex 600 1 "--as=$(bytes "$limit")" -- REL_FIRST_CPU=0 REL_SECOND_CPU=1 "$exe" fill
    if [ "$st" -ne 0 ]; then fail "fill on CPU 0, then on CPU 1, under --as=$limit: status $st"; show ex; else
        echo "ok: --as=$limit: $(grep '^exhaust ' "$tmp/ex.out")"; fi
    ;;
setrlimit|setrlimit-honoured)
    exe=$1
    strict=0
    [ "$case_" = setrlimit-honoured ] && strict=1
    run ex 900 1 "" -- REL_STRICT_AS=$strict REL_FIRST_CPU=0 REL_SECOND_CPU=0 "$exe" setrlimit 256
    if [ "$st" -ne 0 ]; then fail "exhaust setrlimit (strict=$strict): status $st"; show ex; else
        sed -n 's/^/ok: /p' "$tmp/ex.out" | grep 'exhaust setrlimit'; fi
    ;;
headroom)
    exe=$1 limit=$2
    # glibc serves the 1 GiB-aligned blocks the arena cannot place: meson's
    # MALLOC_PERTURB_ would make it write all of each.
    unset MALLOC_PERTURB_
    run ex 600 1 "--as=$(bytes "$limit")" -- VMAPALLOC_PURGE_DELAY_MS=0 VMAPALLOC_LAZY_MAX=1T "$exe" headroom
    if [ "$st" -ne 0 ]; then fail "exhaust headroom under --as=$limit: status $st"; show ex; else
        echo "ok: --as=$limit: $(grep '^exhaust ' "$tmp/ex.out")"; fi
    ;;
regions)
    exe=$1
    run ex 900 1 "--as=$(bytes 6G)" -- VMAPALLOC_RESERVE=256M REL_FIRST_CPU=0 REL_SECOND_CPU=0 "$exe" regions 4
    if [ "$st" -ne 0 ]; then fail "exhaust regions under RESERVE=256M, --as=6G: status $st"; show ex; else
        echo "ok: $(grep '^exhaust ' "$tmp/ex.out")"; fi
    n=$(vmap_lines ex)
    [ "$n" -le 1 ] || { fail "exhaust regions: $n vmapalloc lines"; show ex; }
    ;;
*)
    echo "limits.sh: unknown case $case_"; exit 2 ;;
esac
[ "$fails" -eq 0 ] || { echo "limits.sh $case_: $fails failure(s)"; exit 1; }
echo "limits.sh $case_: OK"

#!/bin/sh
# inject.sh INJECT — system-call failures injected by strace (REQUIREMENTS.md #26).
# VMTEST_LIB names libvmapalloc.so; the program gets only LD_PRELOAD.
#
# INJECT (inject.c) runs under `strace -f -e inject=SYSCALL:error=E:when=N+[S]`
# with the library preloaded: the N-th call of SYSCALL and every one after it
# (every S-th with a step) fails with errno E.  For each of mmap, munmap,
# mremap, mprotect, madvise and process_madvise, N is taken among the
# program's own calls: a run without injection counts the calls made before
# main's getppid() marker (the loader's, never failed) and after it (T); N is
# the first of the program's, and T/4, T/2, 3T/4 further on.  Plus EAGAIN
# variants and one run failing all six every 5th call.  Every run must exit 0
# (inject.c checks its oracles: NULL/ENOMEM, MAP_FAILED, content kept, calloc
# zero, errno kept by free) within 60 s, with no signal and no abort.  A run
# that injected nothing is not counted.
set -u
lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
prog=${1:?usage: inject.sh INJECT}
command -v strace >/dev/null || { echo "SKIP: strace is not installed"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vmap-inject.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
ulimit -c 0 2>/dev/null
SYSCALLS="mmap munmap mremap mprotect madvise process_madvise"
fails=0 runs=0 injected_total=0

# strace's own environment is the caller's; only the program gets the preload.
st() { env -u VMTEST_LIB -u LD_PRELOAD timeout -k 5 60 strace -f -qq -E LD_PRELOAD="$lib" "$@"; }

# ---- the dry run: calls of each system call before and after the marker ----
st -o "$tmp/dry" -e trace=$(echo $SYSCALLS | tr ' ' ,),getppid "$prog" >"$tmp/dry.out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    echo "FAIL: the run without injection: exit $rc"; sed 's/^/  | /' "$tmp/dry.out" | tail -20
    exit 1
fi
sed 's/^/  /' "$tmp/dry.out"
counts=$(awk -v list="$SYSCALLS" '
    BEGIN { n = split(list, s, " ") }
    { name = $0; sub(/^[0-9]+ +/, "", name); sub(/\(.*/, "", name)
      if (name == "getppid") { seen = 1; next }
      if (seen) after[name]++; else before[name]++ }
    END { for (i = 1; i <= n; i++) printf "%s %d %d\n", s[i], before[s[i]] + 0, after[s[i]] + 0 }' "$tmp/dry")
echo "calls before main / in the program: $(echo "$counts" | awk '{printf "%s %d/%d  ", $1, $2, $3}')"

# one SYSCALL ERRNO WHEN: a run; fails on a bad exit, counts the injections
one() {
    sc=$1 err=$2 when=$3
    st -o "$tmp/trace" -e trace="$sc" -e inject="$sc:error=$err:when=$when" "$prog" \
        >"$tmp/out" 2>&1
    rc=$?
    ninj=$(grep -c 'INJECTED' "$tmp/trace")
    [ "$ninj" -gt 0 ] || return 0
    runs=$((runs + 1))
    injected_total=$((injected_total + ninj))
    summary=$(grep '^inject:' "$tmp/out" | sed 's/^inject: //')
    if [ $rc -ne 0 ] || grep -q 'vmapalloc: internal check failed' "$tmp/out"; then
        fails=$((fails + 1))
        case $rc in
            124|137) what="hung (killed after 60 s)" ;;
            13[0-9]|1[4-9][0-9]) what="killed by signal $((rc - 128))" ;;
            *) what="exit $rc" ;;
        esac
        echo "FAIL: $sc error=$err when=$when ($ninj injected): $what"
        sed 's/^/  | /' "$tmp/out" | tail -20
    else
        echo "ok: $sc error=$err when=$when: $ninj injected; $summary"
    fi
}

for sc in $SYSCALLS; do
    set -- $(echo "$counts" | awk -v s="$sc" '$1 == s {print $2, $3}')
    before=$1 after=$2
    if [ "$after" -eq 0 ]; then
        echo "note: the program makes no $sc call here: not injected"
        continue
    fi
    whens=""
    for k in 0 1 2 3; do
        n=$((before + 1 + after * k / 4))
        case " $whens " in *" $n "*) ;; *) whens="$whens $n" ;; esac
    done
    for n in $whens; do
        one "$sc" ENOMEM "$n+"
        one "$sc" ENOMEM "$n+3"
    done
    case $sc in
        mmap|mremap|madvise) one "$sc" EAGAIN "$((before + 1 + after / 3))+2" ;;
    esac
done

# all six at once, every 5th of the program's calls
inj=""
for sc in $SYSCALLS; do
    set -- $(echo "$counts" | awk -v s="$sc" '$1 == s {print $2, $3}')
    inj="$inj -e inject=$sc:error=ENOMEM:when=$(($1 + 1))+5"
done
# shellcheck disable=SC2086
st -o "$tmp/trace" -e trace=$(echo $SYSCALLS | tr ' ' ,) $inj "$prog" >"$tmp/out" 2>&1
rc=$?
n=$(grep -c 'INJECTED' "$tmp/trace")
runs=$((runs + 1)) injected_total=$((injected_total + n))
if [ $rc -ne 0 ]; then
    fails=$((fails + 1))
    echo "FAIL: all six every 5th call ($n injected): exit $rc"
    sed 's/^/  | /' "$tmp/out" | tail -20
else
    echo "ok: all six every 5th call: $n injected; $(grep '^inject:' "$tmp/out" | sed 's/^inject: //')"
fi

echo "inject: $runs runs, $injected_total failures injected, $fails run(s) failed"
[ "$runs" -gt 0 ] || { echo "FAIL: nothing was injected"; exit 1; }
[ "$fails" -eq 0 ]

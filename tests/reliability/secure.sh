#!/bin/sh
# secure.sh SECPROBE — AT_SECURE (setuid) processes ignore every VMAPALLOC_*
# option and output path (REQUIREMENTS.md #41), black box.
#
# ld.so ignores LD_PRELOAD paths with a slash in a secure process; it preloads
# a bare name only from a trusted directory and only a library whose file has
# the set-user-ID bit.  So, as root, this test:
#   - copies libvmapalloc.so ($VMTEST_LIB) to <libdir>/libvmapalloc-sectest.so
#     with mode 4755 (removed at exit),
#   - creates the user `vmtest` (useradd -M) if it does not exist,
#   - copies SECPROBE and /usr/bin/env to a temporary directory, plain and
#     setuid-root (4755),
# and runs them as vmtest with LD_PRELOAD=libvmapalloc-sectest.so and
# VMAPALLOC_HELP=1 / VMAPALLOC_VERBOSE=1 / VMAPALLOC_STATS=<dir>/x-%p /
# VMAPALLOC_RESERVE=bogus.  Expected:
#   plain copy (control): vmapalloc is loaded and obeys: HELP prints the table
#     and exits; VERBOSE prints the settings; the bad value is reported; the
#     report file is written;
#   setuid copy: AT_SECURE=1, vmapalloc is loaded (its arena serves the
#     large block) and ignores everything: no line from vmapalloc on stderr,
#     HELP does not stop the program, no report file appears.
# Skips (77) when not root or when su/useradd are missing.
set -u
probe=${1:?usage: secure.sh SECPROBE}
lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (setuid copies, a trusted-directory library)"; exit 77; }
for t in su useradd; do
    command -v $t >/dev/null 2>&1 || { echo "SKIP: $t not found"; exit 77; }
done
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$multiarch
[ -d "$libdir" ] || libdir=/usr/lib
name=libvmapalloc-sectest.so
dir=$(mktemp -d /tmp/vmap-secure.XXXXXX) || exit 1
created_user=0
cleanup() {
    rm -f "$libdir/$name"
    rm -rf "$dir"
    [ $created_user = 1 ] && userdel vmtest 2>/dev/null
}
trap cleanup EXIT
if ! id vmtest >/dev/null 2>&1; then
    useradd -M -s /bin/sh vmtest || { echo "SKIP: useradd vmtest failed"; exit 77; }
    created_user=1
fi
install -m 4755 "$lib" "$libdir/$name"
chmod 755 "$dir"
mkdir "$dir/out" && chmod 1777 "$dir/out"
install -m 0755 "$probe" "$dir/probe-plain"
install -m 4755 -o root "$probe" "$dir/probe-suid"
install -m 4755 -o root /usr/bin/env "$dir/suid-env"

fails=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }
# as_vmtest OUTNAME COMMAND-LINE: runs it as vmtest with the options set.
as_vmtest() {
    su vmtest -s /bin/sh -c "cd /; VMAPALLOC_STATS=$dir/out/x-%p VMAPALLOC_VERBOSE=1 \
VMAPALLOC_RESERVE=bogus $3 LD_PRELOAD=$name $2" >"$dir/$1.out" 2>"$dir/$1.err" </dev/null
    st=$?
}
show() { sed 's/^/  | /' "$dir/$1.out" "$dir/$1.err" | head -n 12; }

# 1. Control: a plain copy obeys the options.
as_vmtest plain "$dir/probe-plain" ""
grep -q 'at_secure=0 vmapalloc=1 large_owned=1' "$dir/plain.out" || { fail "control: vmapalloc not active"; show plain; }
grep -q 'VMAPALLOC_RESERVE="bogus" is not accepted' "$dir/plain.err" || { fail "control: bad value not reported"; show plain; }
grep -q 'effective settings' "$dir/plain.err" || { fail "control: VERBOSE ignored"; show plain; }
ls "$dir/out"/x-* >/dev/null 2>&1 || { fail "control: no report file written"; show plain; }
rm -f "$dir/out"/x-*
as_vmtest plain-help "$dir/probe-plain" VMAPALLOC_HELP=1
if grep -q secprobe "$dir/plain-help.out" || ! grep -q 'VMAPALLOC_RESERVE' "$dir/plain-help.out"; then
    fail "control: HELP did not print the table and exit"; show plain-help
fi
rm -f "$dir/out"/x-*
[ $fails -eq 0 ] && echo "ok: control (not setuid): vmapalloc loaded and obeyed HELP, VERBOSE, STATS and reported the bad value"

# 2. setuid-root probe run by vmtest: AT_SECURE.
as_vmtest suid "$dir/probe-suid" VMAPALLOC_HELP=1
if ! grep -q 'at_secure=1' "$dir/suid.out"; then
    fail "setuid probe: AT_SECURE not set (nosuid mount?)"; show suid
elif ! grep -q 'vmapalloc=1 large_owned=1' "$dir/suid.out"; then
    fail "setuid probe: vmapalloc was not preloaded in the secure process"; show suid
else
    echo "ok: setuid probe: AT_SECURE=1, vmapalloc loaded and serving: $(cat "$dir/suid.out")"
fi
if grep -q '^vmapalloc' "$dir/suid.out" "$dir/suid.err"; then
    fail "setuid probe: vmapalloc printed something (an option was obeyed):"; show suid
fi
if ls "$dir/out"/x-* >/dev/null 2>&1; then
    fail "setuid probe: VMAPALLOC_STATS wrote $(ls "$dir/out")"; rm -f "$dir/out"/x-*
fi
[ "$st" -eq 0 ] || fail "setuid probe: status $st"

# 3. The brief's form: a setuid-root copy of env running true.
as_vmtest env "$dir/suid-env true" VMAPALLOC_HELP=1
[ "$st" -eq 0 ] || { fail "setuid env true: status $st"; show env; }
if [ -s "$dir/env.out" ] || grep -q vmapalloc "$dir/env.err"; then
    fail "setuid env true: output appeared (HELP/VERBOSE/bad value obeyed)"; show env
fi
if ls "$dir/out"/x-* >/dev/null 2>&1; then fail "setuid env true: a report file was written"; fi
[ $fails -eq 0 ] && echo "ok: setuid env true: no output, no report file, exit 0"

[ "$fails" -eq 0 ] || { echo "secure.sh: $fails failure(s)"; exit 1; }
echo "secure.sh: OK"

#!/bin/sh
# symbols.sh [VMAPALLOC_H] — the dynamic symbol table of libvmapalloc.so.
#
# Checks $VMTEST_LIB:
#  1. the defined dynamic symbols are exactly $INTERPOSED plus the public API
#     (the vmapalloc_* functions declared in VMAPALLOC_H, or $PUBLIC_API when
#     no header is given) plus, optionally, $OPTIONAL;
#  2. none of them carries a version tag (an anonymous version node): a
#     versioned malloc would not interpose references bound to GLIBC_2.2.5;
#  3. at run time (LD_DEBUG=bindings) libc.so.6's own references to
#     $LIBC_MUST_BIND resolve to libvmapalloc.so, not to libc itself.
# Word splitting of the name lists is intended throughout.
# shellcheck disable=SC2086,SC2046
set -u

# ---- the lists: extend here (mmap munmap mremap mmap64 mprotect madvise mincore ...) ----
INTERPOSED="malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign
valloc pvalloc malloc_usable_size free_sized free_aligned_sized cfree malloc_trim mallopt
mallinfo mallinfo2 malloc_stats malloc_info __libc_malloc __libc_free __libc_calloc
__libc_realloc __libc_memalign __libc_valloc __libc_pvalloc __posix_memalign
mmap mmap64 munmap mremap mprotect madvise mincore mlock mlock2 munlock dlopen dlmopen _Fork mseal syscall
_Znwm _Znam _ZdlPv _ZdaPv _ZdlPvm _ZdaPvm"
PUBLIC_API="vmapalloc_version vmapalloc_owns vmapalloc_counter_get vmapalloc_counter_name
vmapalloc_reset_peaks vmapalloc_purge vmapalloc_stats_print"
OPTIONAL="_init _fini"
LIBC_MUST_BIND="malloc free calloc realloc"
# ------------------------------------------------------------------------------------------

lib=${VMTEST_LIB:?VMTEST_LIB must name libvmapalloc.so}
header=${1:-}
[ -f "$lib" ] || { echo "FAIL: VMTEST_LIB=$lib does not exist"; exit 1; }
for tool in nm objdump readelf; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool not found"; exit 1; }
done

if [ -n "$header" ]; then
    [ -f "$header" ] || { echo "FAIL: header $header does not exist"; exit 1; }
    PUBLIC_API=$(grep -E '^[A-Za-z_].*[ *]vmapalloc_[A-Za-z0-9_]+[[:space:]]*\(' "$header" |
                 sed -E 's/.*[ *](vmapalloc_[A-Za-z0-9_]+)[[:space:]]*\(.*/\1/' | sort -u)
    [ -n "$PUBLIC_API" ] || { echo "FAIL: no vmapalloc_* declarations found in $header"; exit 1; }
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/symbols.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

fails=0
checks=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }
ok() { checks=$((checks + 1)); }
words() { printf '%s\n' $1 | sed '/^$/d' | sort -u; }

# ---- 1. exactly the expected names ----
# nm may print name@VERSION / name@@VERSION: strip it here, step 2 checks versions.
nm -D --defined-only "$lib" >"$tmp/nm" || { echo "FAIL: nm -D $lib"; exit 1; }
awk 'NF >= 2 { print $NF }' "$tmp/nm" | sed 's/@.*//' | sort -u >"$tmp/defined"
words "$INTERPOSED $PUBLIC_API" >"$tmp/required"
words "$INTERPOSED $PUBLIC_API $OPTIONAL" >"$tmp/allowed"

missing=$(comm -23 "$tmp/required" "$tmp/defined")
extra=$(comm -13 "$tmp/allowed" "$tmp/defined")
if [ -z "$missing" ]; then ok; else fail "not exported:" $missing; fi
if [ -z "$extra" ]; then ok; else
    fail "exported but not allowed (internal symbols leak, or extend the lists at the top):" $extra
fi
# absolute symbols are what a named version node (VMAPALLOC_1 { ... }) leaves behind
abs=$(awk '$2 == "A" { print $3 }' "$tmp/nm")
if [ -z "$abs" ]; then ok; else fail "version-node (absolute) symbols defined:" $abs; fi

# ---- 2. no version tags on what the library defines ----
# readelf: defined symbols (Ndx not UND) must have no '@' in the name column.
readelf --dyn-syms -W "$lib" |
    awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && NF >= 8 && $8 ~ /@/ { print $8 }' >"$tmp/ver_readelf"
if [ ! -s "$tmp/ver_readelf" ]; then ok; else fail "readelf shows versioned definitions:" $(cat "$tmp/ver_readelf"); fi
# objdump -T: the column before the name is "Base" (or absent) for every defined symbol.
objdump -T "$lib" |
    awk '/^[0-9a-f]+ / && !/\*UND\*/ {
             v = $(NF - 1)
             if (v != "Base" && v !~ /^[0-9a-f]+$/) print $NF " (" v ")"
         }' >"$tmp/ver_objdump"
if [ ! -s "$tmp/ver_objdump" ]; then ok; else fail "objdump -T shows versioned definitions:" $(cat "$tmp/ver_objdump"); fi
if readelf -V -W "$lib" | grep -q "gnu.version_d"; then
    fail "the library has a version definition section (.gnu.version_d)"
else ok; fi

# ---- 3. libc's references bind to vmapalloc at run time ----
# Only LD_PRELOAD goes to the child: vmapalloc warns about unknown VMAPALLOC_* variables.
env -u VMTEST_LIB LD_PRELOAD="$lib" LD_BIND_NOW=1 LD_DEBUG=bindings /bin/true >"$tmp/bind" 2>&1
st=$?
if [ "$st" -eq 0 ]; then ok; else fail "/bin/true under the preload exited $st"; fi
libname=$(basename "$lib" | sed 's/\.so.*//')
for s in $LIBC_MUST_BIND; do
    line=$(grep -E "binding file [^ ]*/libc\.so\.6 \[[0-9]+\] to [^ ]+ \[[0-9]+\]: normal symbol \`$s'" "$tmp/bind" | head -n 1)
    if [ -z "$line" ]; then
        fail "LD_DEBUG=bindings shows no binding of libc.so.6's \`$s'"
        continue
    fi
    case $line in
        *" to "*"/$libname.so"*) ok ;;
        *) fail "libc.so.6's \`$s' does not bind to $libname:" "$line" ;;
    esac
done
if grep -q "$libname" "$tmp/bind"; then ok; else
    fail "LD_DEBUG output never mentions $libname (was it preloaded?)"
fi

if [ "$fails" -ne 0 ]; then
    echo "symbols.sh: $fails failure(s), $checks checks passed"
    exit 1
fi
echo "symbols.sh: OK, $checks checks passed ($(wc -l <"$tmp/defined") exported symbols)"
exit 0

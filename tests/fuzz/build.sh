#!/bin/sh
# tests/fuzz/build.sh [OUTDIR] — builds the libFuzzer targets with clang.
#
#   OUTDIR/fuzz_range     range allocator ops vs a shadow model (core built with VMAP_DEBUG)
#   OUTDIR/fuzz_options   the option parser vs a reference parser
#   OUTDIR/fuzz_slab      malloc facade ops with VMAPALLOC_BACKEND=builtin, on two
#                         threads, vs a shadow model (core built with VMAP_DEBUG)
#
# clang, not meson: meson's compiler for this project is gcc, and libFuzzer
# needs clang (-fsanitize=fuzzer).  The core is compiled from source into each
# fuzzer: the files of core/meson.build's `core_sources` list (read from that
# file, so a module added there is built here too) plus the OS seam
# (os_linux.c), with the project's core flags, ASan + UBSan (every UBSan
# finding aborts), libFuzzer's coverage, and warnings as errors.
# OUTDIR defaults to build-fuzz/ at the top of the source tree.
set -eu

src=$(cd "$(dirname -- "$0")/../.." && pwd)
out=${1:-$src/build-fuzz}
mkdir -p "$out"

CLANG=${CLANG:-}
if [ -z "$CLANG" ]; then
    for c in clang-14 clang; do
        if command -v "$c" >/dev/null 2>&1; then CLANG=$c; break; fi
    done
fi
[ -n "$CLANG" ] || { echo "build.sh: clang not found (apt-get install clang)" >&2; exit 1; }

# core_sources = files('alloc.c', ...) in core/meson.build, possibly over several lines.
core=$(sed -n '/core_sources *= *files(/,/)/p' "$src/core/meson.build" |
       grep -o "'[A-Za-z0-9_]*\.c'" | tr -d "'" | sed "s|^|$src/core/|")
[ -n "$core" ] || { echo "build.sh: no core_sources in core/meson.build" >&2; exit 1; }
core="$core $src/core/os_linux.c"

# The flags of meson.build's core_args, plus the sanitizers.
cflags="-std=gnu11 -g -O2 -Wall -Wextra -Werror -D_GNU_SOURCE
  -ftls-model=initial-exec -fno-builtin-malloc -fno-builtin-calloc
  -fno-builtin-realloc -fno-builtin-free
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
  -fsanitize-coverage-ignorelist=$src/tests/fuzz/coverage-ignore.txt
  -fsanitize-ignorelist=$src/tests/fuzz/sanitize-ignore.txt
  -fno-omit-frame-pointer -I$src/include -I$src/core -pthread"
libs="-pthread -ldl"
if pkg-config --exists libunwind 2>/dev/null; then
    # meson's libunwind feature is 'auto': the core has it whenever it is installed.
    cflags="$cflags -DVMAP_HAVE_LIBUNWIND=1 $(pkg-config --cflags libunwind)"
    libs="$libs $(pkg-config --libs libunwind)"
fi

for t in range options slab; do
    extra=
    [ "$t" != options ] && extra=-DVMAP_DEBUG=1
    # shellcheck disable=SC2086  # word splitting of the flag lists is intended
    $CLANG $cflags $extra -o "$out/fuzz_$t.new" "$src/tests/fuzz/fuzz_$t.c" $core $libs
    mv -f "$out/fuzz_$t.new" "$out/fuzz_$t"
done
echo "build.sh: built $out/fuzz_range $out/fuzz_options $out/fuzz_slab with $($CLANG --version | head -n 1)"

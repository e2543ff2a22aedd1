#!/bin/sh
# Tuning vmapalloc with environment variables.
# Usage: examples/tuning.sh [path/to/libvmapalloc.so]
set -eu
lib=$(realpath "${1:-$(dirname "$0")/../build/preload/libvmapalloc.so}")
prog='
import time
bufs = []
for round in range(20):
    bufs = [bytearray(4 << 20) for _ in range(16)]   # 64 MiB of 4 MiB blocks
    del bufs
time.sleep(0.3)
bytearray(1 << 20)                                     # one more call: purge by age
'
echo "== defaults: freed blocks kept resident up to LAZY_MAX, then purged in batches"
LD_PRELOAD=$lib VMAPALLOC_STATS=1 /usr/bin/python3 -c "$prog"
echo "== keep less cached memory, hand it back sooner"
LD_PRELOAD=$lib VMAPALLOC_STATS=1 VMAPALLOC_LAZY_MAX=16M VMAPALLOC_PURGE_DELAY_MS=100 /usr/bin/python3 -c "$prog"
echo "== every option, its default and what it does"
LD_PRELOAD=$lib VMAPALLOC_HELP=1 /bin/true
echo "== a bad value is reported in one line and the default is used"
LD_PRELOAD=$lib VMAPALLOC_LAZY_MAX=lots /bin/true

#!/usr/bin/env python3
"""tests/fuzz/make-corpus.py — writes the committed seed corpora.

    corpus/range/*    operation sequences for fuzz_range (encoding: fuzz_range.c)
    corpus/options/*  environments for fuzz_options (encoding: fuzz_options.c)
    corpus/slab/*     facade operation sequences for fuzz_slab (encoding: fuzz_slab.c)

Run it again after changing an encoding; the fuzzers add what they find to
a scratch copy (run.sh), never to these directories.
"""
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))

# ---- fuzz_range ------------------------------------------------------------
# op % 16: 0-3 alloc(slot, cls, v24, align) 4-5 free(slot) 6-7 resize(slot,
# mode, v24) 8 move(slot, v24) 9 purge(mode, delta) 10 write(slot)
# 11 verify(slot) 12 cpu(n) 13 trim 14-15 query(slot)


def v24(v):
    return bytes([v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff])


def alloc(slot, cls, v, align=0):
    return bytes([0, slot, cls]) + v24(v) + bytes([align])


def free(slot):
    return bytes([4, slot])


def resize(slot, mode, v):
    return bytes([6, slot, mode]) + v24(v)


def move(slot, v):
    return bytes([8, slot]) + v24(v)


def purge(mode, delta=0):
    return bytes([9, mode, delta])


def write(slot):
    return bytes([10, slot])


def verify(slot):
    return bytes([11, slot])


def cpu(n):
    return bytes([12, n])


TRIM = bytes([13])


def query(slot):
    return bytes([14, slot])


range_seeds = {
    "one-small": alloc(0, 0, 100) + verify(0) + free(0),
    "sizes": b"".join(alloc(i, i, 0x12345 * (i + 1)) for i in range(10)) +
             b"".join(free(i) for i in range(0, 10, 2)) + purge(0) +
             b"".join(alloc(i, 3, 255 + i) for i in range(0, 10, 2)),
    "pool-reuse": b"".join(alloc(i, 3, 16) + free(i) for i in range(20)) + query(0),
    "resize-chain": alloc(1, 2, 1000) + b"".join(resize(1, m, 0x4000 * (m + 1)) for m in range(8)) +
                    verify(1) + resize(1, 2, 5),
    "move-chain": alloc(2, 1, 3000) + alloc(3, 1, 3000) + b"".join(move(2, 0x10000 * k) for k in range(1, 6)) +
                  verify(2) + verify(3),
    "aligned": b"".join(alloc(i, 1, 5000 + i, a) for i, a in enumerate(range(8, 24))),
    "big": alloc(0, 7, 100) + alloc(1, 5, 0x4000) + alloc(2, 9, 0) + free(1) + alloc(1, 8, 0x7fffff) +
           resize(0, 3, 40) + move(1, 0x200000),
    "cross-shard": alloc(0, 2, 10) + alloc(1, 2, 10) + cpu(1) + free(0) + alloc(0, 2, 10) + cpu(0) +
                   free(1) + TRIM + alloc(1, 2, 10),
    "pressure": b"".join(alloc(i % 16, 8, 0xffffff) + free(i % 16) for i in range(24)) + purge(1) +
                purge(2, 200) + purge(3, 255),
    "rewrite": alloc(4, 6, 0x12345) + write(4) + verify(4) + write(4) + resize(4, 0, 1) + verify(4),
    "exact-pages": b"".join(alloc(i, 3, 254 + i) + alloc(i + 8, 4, 254 + i) for i in range(6)) +
                   b"".join(free(i) for i in range(16)) + b"".join(alloc(i, 3, 254 + i) for i in range(6)),
    "chunk-plus": alloc(0, 9, 0x000100) + free(0) + purge(0) + alloc(0, 9, 0x000200, 22),
}

# ---- fuzz_slab -------------------------------------------------------------
# op % 16: 0-1 malloc(slot, sel, v24) 2 calloc(slot, n, sel, v24)
# 3 memalign(slot, align, sel, v24) 4-5 free(slot) 6-7 realloc(slot, sel, v24)
# 8 query(slot) 9 write(slot) 10 galloc(g, class, n, v) 11 gfree(g, mode)
# 12 end (join the worker) 13 trim(pad) 14 reenter(slot, mode, sel, v24)
# 15 check.  | W (0x10): on the worker thread.
W = 0x10


def s_malloc(slot, sel, v, w=0):
    return bytes([0 | w, slot, sel]) + v24(v)


def s_calloc(slot, n, sel, v, w=0):
    return bytes([2 | w, slot, n, sel]) + v24(v)


def s_memalign(slot, align, sel, v, w=0):
    return bytes([3 | w, slot, align, sel]) + v24(v)


def s_free(slot, w=0):
    return bytes([4 | w, slot])


def s_realloc(slot, sel, v, w=0):
    return bytes([6 | w, slot, sel]) + v24(v)


def s_query(slot, w=0):
    return bytes([8 | w, slot])


def s_galloc(g, cls, n, v=0, w=0):
    return bytes([10 | w, g, cls, n, v])


def s_gfree(g, mode, w=0):
    return bytes([11 | w, g, mode])


S_END = bytes([12])


def s_trim(pad=0, w=0):
    return bytes([13 | w, pad])


def s_reenter(slot, mode, sel, v, w=0):
    return bytes([14 | w, slot, mode, sel]) + v24(v)


S_CHECK = bytes([15])

slab_seeds = {
    "sizes": b"".join(s_malloc(i, i % 10, 0x3a7 * (i + 1)) + s_query(i) for i in range(20)) +
             b"".join(s_free(i) for i in range(0, 20, 2)) + S_CHECK,
    "remote-frees": b"".join(s_malloc(i, 1, 100 + 37 * i) for i in range(16)) +
                    b"".join(s_free(i, W) for i in range(16)) + b"".join(s_malloc(i, 1, 100 + 37 * i) for i in range(8)),
    "worker-allocs": b"".join(s_malloc(i, 6, 7 * i, W) for i in range(16)) + b"".join(s_free(i) for i in range(8)) +
                     S_END + b"".join(s_free(i) for i in range(8, 16)) + s_trim(),
    "full-remote": s_galloc(0, 10, 7) + s_gfree(0, 0, W) + s_galloc(1, 10, 7) + s_gfree(1, 2, W) +
                   s_galloc(0, 10, 3) + S_CHECK + s_trim(),
    "abandon-adopt": s_galloc(1, 20, 7, 0, W) + S_END + s_gfree(1, 2) + s_galloc(2, 20, 7) + S_CHECK +
                     s_gfree(2, 1) + s_gfree(1, 0) + s_trim(),
    "abandon-reap": s_galloc(1, 3, 3, 0, W) + s_galloc(2, 40, 7, 0, W) + S_END + s_gfree(1, 0) +
                    s_gfree(2, 3) + s_malloc(0, 0, 40) + s_trim() + S_CHECK,
    "realloc-cross": s_malloc(0, 0, 100) + s_realloc(0, 7, 5000) + s_realloc(0, 1, 900) +
                     s_realloc(0, 5, 3) + s_realloc(0, 5, 12) + s_realloc(0, 2, 4000, W) +
                     s_realloc(0, 8, 0x12345) + s_realloc(0, 0, 50, W) + s_query(0),
    "memalign": b"".join(s_memalign(i, i, i % 10, 977 * i, W if i % 3 == 0 else 0) for i in range(20)) +
                b"".join(s_free(i, W if i % 2 else 0) for i in range(20)),
    "calloc": b"".join(s_calloc(i, i, i % 10, 0x777 * i) for i in range(10)) + s_free(3) +
              s_calloc(3, 2, 1, 500) + s_calloc(4, 1, 4, 9, W),
    "reenter": s_malloc(0, 1, 300) + s_malloc(1, 7, 100) + s_reenter(0, 1, 0, 0) + s_reenter(1, 1, 0, 0) +
               s_reenter(2, 0, 1, 77) + s_reenter(3, 0, 7, 77) + s_malloc(4, 3, 4000) +
               s_reenter(4, 2, 1, 10) + s_realloc(2, 1, 200) + s_free(3),
    "worker-restart": s_malloc(0, 3, 9999, W) + S_END + s_malloc(1, 3, 9999, W) + s_free(0) + S_END +
                      s_galloc(3, 7, 5, 0, W) + S_END + s_galloc(0, 7, 5, 0, W) + s_gfree(3, 0, W) + S_END,
}

# ---- fuzz_options ------------------------------------------------------------
# Byte 0: bit 0 = secure.  Entries separated by '\n'; first byte k of an
# entry: k % 4 in (0, 1) -> "VMAPALLOC_<name #(k/4)>=" + rest; 2 ->
# "VMAPALLOC_" + rest; 3 -> rest as is.

names = []
with open(os.path.join(here, "..", "..", "core", "options.def")) as f:
    for m in re.finditer(r"^X\((\w+),", f.read(), re.M):
        names.append(m.group(1))


def named(name, value):
    k = names.index(name) * 4
    return bytes([k]) + value.encode()


def prefixed(rest):
    return bytes([2]) + rest.encode()


def raw(rest):
    return bytes([3]) + rest.encode()


def env(*entries, secure=False):
    return bytes([1 if secure else 0]) + b"\n".join(entries)


def value_for(name):
    return {"RESERVE": "1G", "SMALL_MAX": "64KiB", "SHARDS": "4", "POOL_PAGES": "512",
            "CACHE_BYTES": "8mb", "LAZY_MAX": "0", "PURGE_DELAY_MS": "3600000",
            "PURGE_ADVICE": "FREE", "COUNTER": "percpu", "STATS": "/tmp/x-%p-%e",
            "STATS_FORMAT": "json", "BACKEND": "libc"}.get(name, "yes")


options_seeds = {
    "empty": env(),
    "all-valid": env(*(named(n, value_for(n)) for n in names)),
    "all-valid-secure": env(*(named(n, value_for(n)) for n in names), secure=True),
    "bad-values": env(named(names[0], "maybe"), named("RESERVE", "1Q"), named("SHARDS", "-1"),
                      named("RESERVE", "99999999999999999999999"), named("SMALL_MAX", ""),
                      named("PURGE_DELAY_MS", "10k"), named("RESERVE", "1KiBx")),
    "unknown": env(prefixed("RESRVE=1G"), prefixed("X=1"), prefixed("=1"), prefixed("NOEQUALS"),
                   prefixed("SHARDS"), raw("VMAPALLOC_reserve=1G"), raw("PATH=/bin")),
    "overlong": env(named("STATS", "a" * 255), named("STATS", "b" * 256), named("RESERVE", "9" * 300)),
    "duplicates": env(named("SHARDS", "3"), named("SHARDS", "5"), named("SHARDS", "bad")),
    "limits": env(named("RESERVE", "256M"), named("RESERVE", "255M"), named("RESERVE", "1T"),
                  named("RESERVE", "1025G"), named("SMALL_MAX", "0"), named("SHARDS", "128"),
                  named("SHARDS", "129")),
}


def write_dir(d, seeds):
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


write_dir(os.path.join(here, "corpus", "range"), range_seeds)
write_dir(os.path.join(here, "corpus", "options"), options_seeds)
write_dir(os.path.join(here, "corpus", "slab"), slab_seeds)

# A libFuzzer dictionary for the option parser: every name and the value words.
with open(os.path.join(here, "options.dict"), "w") as f:
    f.write("# tests/fuzz/options.dict, written by make-corpus.py\n")
    for n in names:
        f.write('name_%s="%s"\n' % (n, n))
    for i, w in enumerate(["VMAPALLOC_", "=", "K", "KiB", "kb", "M", "G", "T", "yes", "no", "on",
                           "off", "true", "false", "0", "1", "18446744073709551615", "-", "|",
                           "dontneed", "free", "auto", "atomic", "percpu", "text", "json", "none",
                           "USR1", "libc", "%p", "%e"]):
        f.write('w%d="%s"\n' % (i, w))
print("make-corpus.py: %d range seeds, %d slab seeds, %d options seeds, %d option names"
      % (len(range_seeds), len(slab_seeds), len(options_seeds), len(names)), file=sys.stderr)

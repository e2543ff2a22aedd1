"""A small, allocation-heavy workload for scripts/demo.

Run it under the preload to see vmapalloc's statistics report at exit:
    VMAPALLOC_STATS=1 LD_PRELOAD=build/preload/libvmapalloc.so /usr/bin/python3 examples/demo.py
It allocates large bytearrays (grown and shrunk in place), a dict of half a million
entries and a JSON round trip, and prints a short summary with digests, which are the
same with and without the preload.
"""
import hashlib
import json
import time

MiB = 1 << 20


def big_buffers():
    bufs = [bytearray(b"%02d" % i) * (2 * MiB + 4096 * i) for i in range(32)]  # 4..4.25 MiB each
    for i, b in enumerate(bufs):
        if i % 2:
            b.extend(bytes(3 * MiB))      # grow: realloc of a multi-MiB block
        else:
            del b[MiB:]                   # shrink
    total = sum(len(b) for b in bufs)
    h = hashlib.sha256()
    for b in bufs:
        h.update(b)
    return len(bufs), total, h.hexdigest()[:16]


def big_dict():
    d = {"key-%d" % i: [i, str(i) * (i % 4)] for i in range(500_000)}
    for i in range(0, 500_000, 2):
        del d["key-%d" % i]
    h = hashlib.sha256(repr(sorted(d.items())[:1000]).encode())
    return len(d), h.hexdigest()[:16]


def json_round_trip():
    data = [{"id": i, "name": "n%d" % i, "vals": list(range(i % 16)), "ok": i % 3 == 0}
            for i in range(100_000)]
    text = json.dumps(data, sort_keys=True)
    assert json.loads(text) == data
    return len(text), hashlib.sha256(text.encode()).hexdigest()[:16]


def main():
    for name, fn in (("bytearrays", big_buffers), ("dict", big_dict), ("json", json_round_trip)):
        t0 = time.perf_counter()
        result = fn()
        dt = time.perf_counter() - t0
        print("%-10s %-50s %6.2f s" % (name, " ".join(map(str, result)), dt))


if __name__ == "__main__":
    main()

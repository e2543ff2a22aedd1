#!/usr/bin/env bash
# CPython under the preload: large bytearrays grown and shrunk in place (realloc of
# multi-MiB blocks), a dict of a million items, a JSON round trip of a large
# structure, and 4 threads building lists with objects freed on other threads.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname -- "$0")/lib.sh"

PY=/usr/bin/python3   # not a pyenv shim: that may be absent in CI
real_init python3 "$PY"
real_log "program: $("$PY" --version 2>&1)"
real_check_binding "$PY" -c pass

workload() {
    "$PY" - <<'EOF'
import gc, hashlib, json, queue, sys, threading

def digest(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, (bytes, bytearray)) else repr(p).encode())
    return h.hexdigest()

MiB = 1 << 20

# 1. 50 x 8 MiB bytearrays, marked, then resized in place (grow / shrink / odd sizes).
pattern = bytes(range(256))
arrs = []
for i in range(50):
    b = bytearray(pattern * (8 * MiB // 256))
    n = len(range(i, len(b), 4099))
    b[i::4099] = bytes([(i * 37) & 0xFF]) * n
    arrs.append(b)
for i, b in enumerate(arrs):
    if i % 3 == 0:
        b.extend(b[: 4 * MiB])                   # grow to 12 MiB
    elif i % 3 == 1:
        del b[5 * MiB + i:]                       # shrink
    else:
        b += bytes(MiB // 2 + 40961 * i)          # odd-sized growth, calloc up to 2.4 MiB
    b[-1] = i
h = hashlib.sha256()
for b in arrs:
    h.update(len(b).to_bytes(8, "little"))
    h.update(b)
print("bytearrays", len(arrs), sum(map(len, arrs)), h.hexdigest())
joined = b"".join(bytes(b[:MiB]) for b in arrs)
print("joined", len(joined), digest(joined))
del arrs, joined, b

# 2. A dict of 1e6 items; delete a third; sorted digest.
d = {}
for i in range(1_000_000):
    d["k%08x" % ((i * 2654435761) % 4294967296)] = (i, str(i) * (i % 5))
for i in range(0, 1_000_000, 3):
    del d["k%08x" % ((i * 2654435761) % 4294967296)]
items = sorted(d.items())
print("dict", len(d), digest(items[:1000], items[-1000:], sum(v[0] for v in d.values())))
s = {k[:5] for k in d}
print("set", len(s), digest(sorted(s)))
del d, items, s

# 3. JSON round trip of a large structure.
data = [
    {
        "id": i,
        "name": "item-%d" % (i * 7919 % 100003),
        "tags": ["t%d" % (i % k) for k in (3, 5, 7, 11)],
        "score": i * 0.5,
        "nested": {"a": [i, i + 1, i * 2], "b": None if i % 2 else True, "s": "x" * (i % 97)},
    }
    for i in range(200_000)
]
text = json.dumps(data, sort_keys=True)
back = json.loads(text)
assert back == data
text2 = json.dumps(back, separators=(",", ":"))
text3 = json.dumps(back[:20_000], sort_keys=True, indent=1)   # the pure-Python encoder
print("json", len(text), len(text2), len(text3), digest(text.encode()), digest(text2.encode()), digest(text3.encode()))
del data, back, text, text2, text3
gc.collect()

# 4. Four threads building lists; results freed by the main thread.
results = [None] * 4

def build(tid):
    lst = []
    for i in range(300_000):
        v = (i * (tid + 3)) % 100_003
        lst.append((v, str(v) * (1 + i % 4), [tid] * (i % 6)))
    lst.sort()
    results[tid] = (len(lst), digest(lst[:500], lst[-500:], sum(t[0] for t in lst)))
    del lst

threads = [threading.Thread(target=build, args=(t,)) for t in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for tid, r in enumerate(results):
    print("thread", tid, *r)

# 5. Producer/consumer: buffers allocated on one thread, freed on another.
q = queue.Queue(maxsize=256)

def produce():
    for i in range(40_000):
        q.put(bytearray(b"%d" % i) * (1 + (i * 131) % 2500))
    q.put(None)

total = 0
hq = hashlib.sha256()
p = threading.Thread(target=produce)
p.start()
while (item := q.get()) is not None:
    total += len(item)
    hq.update(item[:16])
p.join()
print("queue", total, hq.hexdigest())
EOF
}

real_compare

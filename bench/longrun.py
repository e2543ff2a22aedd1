#!/usr/bin/python3
"""bench/longrun.py — footprint over time: mappings and RSS of long-running workloads.

A preloaded allocator lives as long as the process: what it keeps mapped and
resident after hours of allocating and freeing matters as much as its speed.
Each workload runs under glibc (no preload), mimalloc, jemalloc, tcmalloc and
vmapalloc, R times, interleaved (repetition r runs every allocator once, the
first one rotated, before repetition r + 1), and the table gives the median of

  maps peak     most lines of /proc/PID/maps seen at any point of the run
  maps end      the workload's own count right before it exits
  fork+wait µs  mean fork() + waitpid() of a child that only exits (python,
                fork1g): fork copies one VMA per mapping and the page tables
  tables KiB    VmPTE right after the forks (python): the page tables, which
                fork copies under every mapping with anonymous pages, empty
                or not; unlike the time, it does not depend on the machine's load
  peak RSS MB   VmHWM (not ru_maxrss, which fork and exec carry over)
  RSS end MB    VmRSS right before it exits: what is still held
  wall s        start to exit, as the driver sees it

and for vmapalloc the range (min–max over repetitions) and each median as a
ratio to the best (lowest) of the other four (x1.35: 35% more).

How: the driver starts a workload with subprocess.Popen and a sampler thread
reads the line count of /proc/PID/maps (and VmRSS of /proc/PID/status) every
2 ms until the process exits.  The workload reports its own end figures
(mappings, VmRSS, VmHWM; fork_us, VmPTE) in one key=value line on stdout right
before it exits; the peak is the larger of the sampler's maximum and that
end count.  The other keys of the line are results, which must be the same
under every allocator (the script exits non-zero if not).  The sampler also
checks, once per run, that the preloaded library's file is mapped into the
process: a preload that did not take effect fails the run loudly.  Reading
/proc/PID/maps costs the kernel time proportional to the mappings, and takes
the process's mmap lock for reading: a process with thousands of mappings is
slowed a little by being watched, and its wall time includes that.

Workloads (sizes at --rounds-scale 1; F scales them, not the idle sleep):
  python   /usr/bin/python3: 40 rounds of a list of 100 000 small dicts put
           through json.dumps and dropped; then 200 os.fork() + waitpid
  ruby     /usr/bin/ruby: 20 rounds of 200 000 strings and a hash of a third
           of them, dropped, then GC.start (Ruby maps its 16 KiB heap pages
           itself, twice as large, and unmaps what is past their alignment)
  realloc  build/bench/realloc_heavy: 64 slots, 20 000 steps of malloc
           4..64 KiB, free, or realloc x1.5 (up to 8 MiB), checksummed
  redis    /usr/bin/redis-server (Debian's) driven over a socket: SET/DEL
           of 1 KiB..1 MiB values, the data set grown to ~200 MB and shrunk
           to ~20 MB three times, values checked with GET; then INFO memory,
           and the end figures are read from /proc/PID (no fork figure)
  idle     build/bench/idle_burst: 400 blocks of 64 KiB..1 MiB written and
           freed, then 4 s of nanosleep: what is still held when idle
  fork1g   build/bench/fork_live: 512 x 2 MiB live and written, 200 fork +
           waitpid

    bench/longrun.py                          # everything, 3 repetitions: ~6 minutes
    bench/longrun.py -r 1 --rounds-scale 0.25 # quick
    bench/longrun.py --only python,idle --env VMAPALLOC_BACKEND=builtin
    bench/longrun.py --vmapalloc /tmp/libvmapalloc.so --out bench/results/longrun.md

--env K=V (repeatable) is added to the environment of the vmapalloc runs only;
VMAPALLOC_* variables of the caller's environment are not passed on.
Standard library only.
"""

import argparse
import hashlib
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIBDIR = "/usr/lib/x86_64-linux-gnu"
PEERS = [("glibc", None),
         ("mimalloc", LIBDIR + "/libmimalloc.so.2"),
         ("jemalloc", LIBDIR + "/libjemalloc.so.2"),
         ("tcmalloc", LIBDIR + "/libtcmalloc_minimal.so.4")]
PYTHON = "/usr/bin/python3"        # not a pyenv shim from PATH
RUBY = "/usr/bin/ruby"
REDIS = "/usr/bin/redis-server"
SAMPLE_S = 0.002                   # the sampler's period

# The end line's keys that are figures; every other key is a result.
END_KEYS = ("maps", "rss_kib", "hwm_kib", "fork_us", "pte_kib")

# Table columns: (key, header, format).
COLUMNS = [("maps_peak", "maps peak", "{:.0f}"),
           ("maps_end", "maps end", "{:.0f}"),
           ("fork_us", "fork+wait µs", "{:.0f}"),
           ("pte_kib", "tables KiB", "{:.0f}"),
           ("rss_peak_mb", "peak RSS MB", "{:.1f}"),
           ("rss_end_mb", "RSS end MB", "{:.1f}"),
           ("wall_s", "wall s", "{:.2f}")]


class Failure(Exception):
    """A run that cannot be measured: the workload failed, the preload did
    not take effect, or the results differ between allocators."""


class Allocator:
    def __init__(self, name, lib, extra_env=None):
        self.name = name
        self.lib = lib
        # Neither LD_PRELOAD nor VMAPALLOC_* options of the caller leak in,
        # nor MALLOC_PERTURB_ (meson test sets it: glibc would then write
        # every block it frees).
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("LD_PRELOAD", "MALLOC_PERTURB_") and not k.startswith("VMAPALLOC_")}
        self.env.update({"LC_ALL": "C", "PYTHONHASHSEED": "0"})
        if lib:
            self.env["LD_PRELOAD"] = lib
        self.env.update(extra_env or {})


def allocators(vmapalloc_lib, vmapalloc_env=None):
    """The allocators present, vmapalloc last, and a note per missing one."""
    found, notes = [], []
    for name, lib in PEERS:
        if lib and not os.path.exists(lib):
            notes.append(f"{name}: {lib} not found, skipped")
            continue
        found.append(Allocator(name, lib))
    if not os.path.exists(vmapalloc_lib):
        raise Failure(f"vmapalloc: {vmapalloc_lib} not found (ninja -C build)")
    found.append(Allocator("vmapalloc", os.path.abspath(vmapalloc_lib), vmapalloc_env))
    return found, notes


def lib_needle(lib):
    """What a library's line in /proc/PID/maps contains: the file name of
    its real path (libmimalloc.so.2 is a link to libmimalloc.so.2.0)."""
    return os.path.basename(os.path.realpath(lib)).encode()


# Every known allocator library, to notice one that a program links itself
# (Debian's redis-server links libjemalloc.so.2).
KNOWN_NEEDLES = {name: lib_needle(lib) for name, lib in PEERS if lib and os.path.exists(lib)}


class Sampler(threading.Thread):
    """Reads the mapping count and VmRSS of a process every SAMPLE_S until
    stopped; keeps the maxima, and which known allocator libraries (the
    preloaded one included) it saw mapped."""

    def __init__(self, pid, lib):
        super().__init__(daemon=True)
        self.pid = pid
        self.needles = dict(KNOWN_NEEDLES)
        if lib:
            self.needles["preload"] = lib_needle(lib)
        self.seen = set()
        self.maps_max = 0
        self.rss_max_kib = 0
        self.samples = 0
        self.stop = threading.Event()

    def run(self):
        maps_path, status_path = f"/proc/{self.pid}/maps", f"/proc/{self.pid}/status"
        while not self.stop.is_set():
            try:
                with open(maps_path, "rb", buffering=0) as f:
                    data = f.read()
                with open(status_path, "rb", buffering=0) as f:
                    status = f.read()
            except (FileNotFoundError, ProcessLookupError):
                break
            if data:  # empty once the process is a zombie
                self.samples += 1
                self.maps_max = max(self.maps_max, data.count(b"\n"))
                for name, needle in self.needles.items():
                    if name not in self.seen and needle in data:
                        self.seen.add(name)
                self.rss_max_kib = max(self.rss_max_kib, status_kib(status, b"VmRSS:") or 0)
            time.sleep(SAMPLE_S)


def status_kib(status, key):
    """The value of 'KEY  N kB' in the bytes of a /proc/PID/status."""
    i = status.find(b"\n" + key)
    if i < 0:
        return None
    return int(status[i + len(key) + 1:].split(None, 1)[0])


def maps_count(pid):
    with open(f"/proc/{pid}/maps", "rb") as f:
        return f.read().count(b"\n")


def parse_end_line(text):
    """The last line of a workload's stdout: key=value pairs."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise Failure("the workload printed no end line")
    kv = dict(tok.split("=", 1) for tok in lines[-1].split() if "=" in tok)
    for k in ("maps", "rss_kib", "hwm_kib"):
        if k not in kv:
            raise Failure(f"the end line has no {k}=: {lines[-1]!r}")
    return kv


class Watched:
    """A workload process under an allocator, watched by a Sampler.

    stdout and stderr go to temporary files (nothing to drain while it
    runs).  wait() waits for the exit without reaping (WNOWAIT), so that the
    sampler cannot read a new process that reuses the pid, then stops the
    sampler and reaps."""

    def __init__(self, argv, alloc, what, cwd=None):
        self.alloc, self.what = alloc, what
        self.out = tempfile.TemporaryFile()
        self.err = tempfile.TemporaryFile()
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, env=alloc.env, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=self.out, stderr=self.err)
        self.sampler = Sampler(self.proc.pid, alloc.lib)
        self.sampler.start()
        self.wall = None

    def output(self):
        self.out.seek(0)
        self.err.seek(0)
        return self.out.read().decode(errors="replace"), self.err.read().decode(errors="replace")

    def wait(self):
        """Wait for the exit; return stdout.  Fails on a non-zero exit or a
        preload that did not take effect."""
        os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
        self.wall = time.perf_counter() - self.t0
        self.sampler.stop.set()
        self.sampler.join()
        rc = self.proc.wait()
        out, err = self.output()
        if rc != 0:
            tail = "\n".join((out + err).splitlines()[-15:])
            raise Failure(f"{self.what} under {self.alloc.name} exited {rc}:\n{tail}")
        self.check_preload()
        return out

    def check_preload(self):
        if self.alloc.lib and "preload" not in self.sampler.seen:
            raise Failure(f"{self.what} under {self.alloc.name}: {self.alloc.lib} never appeared "
                          f"in /proc/{self.proc.pid}/maps ({self.sampler.samples} samples): "
                          f"the preload did not take effect")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.sampler.stop.set()

    def figures(self, end):
        """The row of figures from an end line's key=value pairs (and the
        sampler); the other pairs of the line as the results."""
        maps_end = int(end["maps"])
        figs = {
            "maps_peak": max(self.sampler.maps_max, maps_end),
            "maps_end": maps_end,
            "fork_us": float(end["fork_us"]) if "fork_us" in end else None,
            "pte_kib": int(end["pte_kib"]) if "pte_kib" in end else None,
            "rss_peak_mb": max(int(end["hwm_kib"]), self.sampler.rss_max_kib) / 1024,
            "rss_end_mb": int(end["rss_kib"]) / 1024,
            "wall_s": self.wall,
            # Without a preload: the allocator libraries the program links itself.
            "linked": sorted(self.sampler.seen) if self.alloc.lib is None else [],
        }
        return figs, {k: v for k, v in end.items() if k not in END_KEYS}


def scaled(n, scale, minimum=1):
    return max(minimum, int(round(n * scale)))


# ---------------------------------------------------------------- workloads

PY_WORKLOAD = r"""
import json, os, sys, time
rounds, forks = int(sys.argv[1]), int(sys.argv[2])
total = 0
for r in range(rounds):
    items = [{'id': i, 'name': 'item%d' % i, 'vals': [i, i * 2, i * 3], 'f': i / 3.0}
             for i in range(100000)]
    text = json.dumps(items)
    total += len(text)
    del items, text
t0 = time.perf_counter()
for _ in range(forks):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit('child exited with status %d' % status)
fork_us = (time.perf_counter() - t0) * 1e6 / forks
with open('/proc/self/status') as f:   # the tables the forks copied
    pte_kib = [int(ln.split()[1]) for ln in f if ln.startswith('VmPTE:')][0]

# The end figures, read in 64 KiB pieces (a maps file can be megabytes).
maps = 0
fd = os.open('/proc/self/maps', os.O_RDONLY)
while True:
    chunk = os.read(fd, 65536)
    if not chunk:
        break
    maps += chunk.count(b'\n')
os.close(fd)
kib = {}
with open('/proc/self/status') as f:
    for line in f:
        key, _, val = line.partition(':')
        if key in ('VmRSS', 'VmHWM'):
            kib[key] = int(val.split()[0])
print('rounds=%d forks=%d json_bytes=%d fork_us=%.1f pte_kib=%d maps=%d rss_kib=%d hwm_kib=%d'
      % (rounds, forks, total, fork_us, pte_kib, maps, kib['VmRSS'], kib['VmHWM']), flush=True)
"""


def python_workload(alloc, rounds=40, forks=200):
    """The python workload at the given size: (figures, results)."""
    w = Watched([PYTHON, "-c", PY_WORKLOAD, str(rounds), str(forks)], alloc, "python")
    try:
        return w.figures(parse_end_line(w.wait()))
    finally:
        w.kill()


def run_python(alloc, sizes, opts):
    return python_workload(alloc, *sizes)


RB_WORKLOAD = r"""
rounds = ARGV[0].to_i
total = 0
rounds.times do |r|
  a = Array.new(200_000) { |i| "item#{i}-#{r}" + ("x" * (i % 40)) }
  h = {}
  a.each_with_index { |s, i| h[s] = i if i % 3 == 0 }
  total += a.sum(&:bytesize) + h.size
  a = nil
  h = nil
  GC.start
end
maps = File.read("/proc/self/maps").count("\n")
st = File.read("/proc/self/status")
rss = st[/VmRSS:\s+(\d+)/, 1].to_i
hwm = st[/VmHWM:\s+(\d+)/, 1].to_i
puts "rounds=#{rounds} bytes=#{total} maps=#{maps} rss_kib=#{rss} hwm_kib=#{hwm}"
"""


def ruby_workload(alloc, rounds=20):
    """The ruby workload at the given size: (figures, results)."""
    w = Watched([RUBY, "-e", RB_WORKLOAD, str(rounds)], alloc, "ruby")
    try:
        return w.figures(parse_end_line(w.wait()))
    finally:
        w.kill()


def run_ruby(alloc, sizes, opts):
    return ruby_workload(alloc, *sizes)


def c_workload(prog):
    """A C workload of build/bench: its sizes are its arguments."""
    def run(alloc, sizes, opts):
        path = os.path.join(opts.bindir, prog)
        w = Watched([path] + [str(n) for n in sizes], alloc, prog)
        try:
            return w.figures(parse_end_line(w.wait()))
        finally:
            w.kill()
    return run


class Resp:
    """A minimal RESP client: one command, one reply."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.rd = self.sock.makefile("rb")

    def command(self, *args):
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            parts += [b"$%d\r\n" % len(a), a, b"\r\n"]
        self.sock.sendall(b"".join(parts))
        return self.reply()

    def reply(self):
        line = self.rd.readline()
        if not line:
            raise ConnectionError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise Failure("redis error: " + rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.rd.read(n + 2)[:-2]
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise Failure(f"redis: bad reply {line!r}")

    def close(self):
        self.rd.close()
        self.sock.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_traffic(r, high_mb, low_mb):
    """The SET/DEL mix: the data set (sum of value sizes) grown to high_mb
    and shrunk to low_mb, three times.  While growing, one operation in
    four deletes a random live key; while shrinking, one in four sets a new
    one.  Sizes 1 KiB..1 MiB, log-uniform (as many small values as large
    ones per octave), from a fixed seed; every 16th operation reads a random
    live value back and compares it.  Returns the results."""
    rng = random.Random(20240601)
    block = rng.randbytes((1 << 20) + 64)
    high, low = high_mb * 1e6, low_mb * 1e6
    keys, sizes = [], {}          # live keys (indexable, for a random pick), key -> size
    total = next_key = ops = gets = 0
    digest = hashlib.sha256()

    def value(key, size):
        head = b"%010d|" % key
        return head + block[key % 64:key % 64 + size - len(head)]

    def set_new():
        nonlocal total, next_key
        key, size = next_key, int(1024 * 1024 ** rng.random())
        next_key += 1
        if r.command("SET", b"k%d" % key, value(key, size)) != "OK":
            raise Failure("redis: SET failed")
        keys.append(key)
        sizes[key] = size
        total += size

    def del_random():
        nonlocal total
        i = rng.randrange(len(keys))
        keys[i], keys[-1] = keys[-1], keys[i]
        key = keys.pop()
        if r.command("DEL", b"k%d" % key) != 1:
            raise Failure(f"redis: DEL k{key} deleted nothing")
        total -= sizes.pop(key)

    def step(grow):
        nonlocal ops, gets
        if (rng.random() < 0.25) == grow and keys:
            del_random()
        else:
            set_new()
        ops += 1
        if ops % 16 == 0 and keys:
            key = rng.choice(keys)
            got = r.command("GET", b"k%d" % key)
            if got != value(key, sizes[key]):
                raise Failure(f"redis: GET k{key} returned other contents")
            digest.update(got)
            gets += 1

    for _ in range(3):
        while total < high:
            step(True)
        while total > low:
            step(False)
    dbsize = r.command("DBSIZE")
    if dbsize != len(keys):
        raise Failure(f"redis: DBSIZE {dbsize}, expected {len(keys)}")
    return {"ops": str(ops), "gets": str(gets), "dbsize": str(dbsize),
            "live_bytes": str(total), "digest": digest.hexdigest()[:16]}


def run_redis(alloc, sizes, opts):
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="longrun-redis.") as d:
        argv = [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", d]
        w = Watched(argv, alloc, "redis-server", cwd=d)
        try:
            r = None
            for _ in range(200):
                if w.proc.poll() is not None:
                    break
                try:
                    r = Resp(port)
                    if r.command("PING") == "PONG":
                        break
                except (ConnectionError, OSError):
                    r = None
                    time.sleep(0.05)
            if r is None:
                w.proc.poll()
                out, err = w.output()
                raise Failure(f"redis-server under {alloc.name} did not come up on port {port}:\n"
                              + "\n".join((out + err).splitlines()[-15:]))
            try:
                results = redis_traffic(r, *sizes)
                info = r.command("INFO", "memory").decode()
            except OSError as e:   # ConnectionError and timeouts included
                w.proc.poll()
                out, err = w.output()
                raise Failure(f"redis-server under {alloc.name}: {e}:\n"
                              + "\n".join((out + err).splitlines()[-15:]))
            mem = dict(ln.split(":", 1) for ln in info.splitlines() if ":" in ln)
            # The end figures, as the other workloads report them themselves.
            with open(f"/proc/{w.proc.pid}/status", "rb") as f:
                status = f.read()
            end = {"maps": str(maps_count(w.proc.pid)),
                   "rss_kib": str(status_kib(status, b"VmRSS:")),
                   "hwm_kib": str(status_kib(status, b"VmHWM:"))}
            try:
                r.command("SHUTDOWN", "NOSAVE")
            except (ConnectionError, OSError):
                pass  # the server closes the connection as it exits
            r.close()
            w.wait()
            figs, _ = w.figures(end)
            figs["note"] = f"used_memory {int(mem.get('used_memory', 0)) / 1e6:.1f} MB"
            return figs, results
        finally:
            w.kill()


class Workload:
    """run(alloc, sizes, opts) -> (figures, results); sizes(F): the sizes at
    --rounds-scale F, which also fill in the description."""

    def __init__(self, run, sizes, desc):
        self.run, self.sizes, self.desc = run, sizes, desc


WORKLOADS = {
    "python": Workload(run_python, lambda f: (scaled(40, f), scaled(200, f, 20)),
                       "/usr/bin/python3: {} rounds of 100 000 dicts through json.dumps, "
                       "then {} fork+wait"),
    "ruby": Workload(run_ruby, lambda f: (scaled(20, f),),
                     "/usr/bin/ruby: {} rounds of 200 000 strings and a hash, dropped, GC.start"),
    "realloc": Workload(c_workload("realloc_heavy"), lambda f: (scaled(20000, f),),
                        "realloc_heavy: {} steps of malloc / free / realloc x1.5 (4 KiB..8 MiB)"),
    "redis": Workload(run_redis, lambda f: (scaled(200, f), scaled(20, f)),
                      "redis-server: SET/DEL of 1 KiB..1 MiB values, {} MB -> {} MB three times"),
    # The sleep is not scaled: what is measured is what time alone gives back.
    "idle": Workload(c_workload("idle_burst"), lambda f: (scaled(400, f), 4000),
                     "idle_burst: {} blocks of 64 KiB..1 MiB written and freed, then {} ms idle"),
    "fork1g": Workload(c_workload("fork_live"), lambda f: (scaled(512, f), scaled(200, f, 20)),
                       "fork_live: {} x 2 MiB live, {} fork+wait"),
}

NEEDS = {"python": PYTHON, "ruby": RUBY, "redis": REDIS, "realloc": "realloc_heavy", "idle": "idle_burst",
         "fork1g": "fork_live"}


# ---------------------------------------------------------------- report

def fmt(fmt_s, v):
    return "-" if v is None else fmt_s.format(v)


def table(allocs, runs):
    """Rows (lists of cells) of one workload's table: a header, a row per
    allocator (medians), then vmapalloc's range and its ratios."""
    med = {}
    for a in allocs:
        med[a] = {}
        for key, _, _ in COLUMNS:
            vals = [r[key] for r in runs[a] if r[key] is not None]
            med[a][key] = statistics.median(vals) if vals else None
    rows = [["allocator"] + [h for _, h, _ in COLUMNS]]
    for a in allocs:
        rows.append([a] + [fmt(f, med[a][k]) for k, _, f in COLUMNS])
    if "vmapalloc" in allocs:
        rng, ratio = ["  vmapalloc range"], ["  vmapalloc / best other"]
        for key, _, f in COLUMNS:
            vals = [r[key] for r in runs["vmapalloc"] if r[key] is not None]
            rng.append(f"{fmt(f, min(vals))}–{fmt(f, max(vals))}" if vals else "-")
            others = [med[a][key] for a in allocs if a != "vmapalloc" and med[a][key] is not None]
            v = med["vmapalloc"][key]
            ratio.append(f"x{v / min(others):.2f}" if v is not None and others and min(others) > 0
                         else "-")
        rows += [rng, ratio]
    return rows


def text_table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)


def md_table(rows):
    lines = ["| " + " | ".join(rows[0]) + " |", "|---|" + "---:|" * (len(rows[0]) - 1)]
    lines += ["| " + " | ".join(c.strip() for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def progress(rep, reps, name, alloc, figs):
    print(f"longrun: [{rep + 1}/{reps}] {name:<8} {alloc:<9} maps {figs['maps_peak']:>6} peak "
          f"{figs['maps_end']:>6} end, RSS {figs['rss_peak_mb']:7.1f} peak {figs['rss_end_mb']:7.1f} "
          f"end MB, {figs['wall_s']:6.2f} s"
          + (f", fork {figs['fork_us']:.0f} µs" if figs["fork_us"] is not None else "")
          + (f", {figs['note']}" if figs.get("note") else ""), file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vmapalloc", default=os.path.join(ROOT, "build/preload/libvmapalloc.so"),
                    metavar="LIB", help="the vmapalloc library (build/preload/libvmapalloc.so)")
    ap.add_argument("-r", "--repeats", type=int, default=3, metavar="N",
                    help="interleaved repetitions (3)")
    ap.add_argument("--only", metavar="NAME[,NAME]", help="workloads: " + ",".join(WORKLOADS))
    ap.add_argument("--rounds-scale", type=float, default=1.0, metavar="F",
                    help="scale the workload sizes (0.25 for a quick run)")
    ap.add_argument("--bindir", default=os.path.join(ROOT, "build/bench"),
                    help="where the C workloads are built (build/bench)")
    ap.add_argument("--out", metavar="FILE", help="also write the tables as Markdown")
    ap.add_argument("--env", action="append", default=[], metavar="K=V",
                    help="extra environment of the vmapalloc runs (repeatable)")
    opts = ap.parse_args()
    if opts.repeats < 1 or opts.rounds_scale <= 0:
        sys.exit("longrun: -r must be >= 1 and --rounds-scale > 0")
    names = [n.strip() for n in opts.only.split(",")] if opts.only else list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            sys.exit(f"longrun: unknown workload {n!r} ({', '.join(WORKLOADS)})")
    extra = {}
    for e in opts.env:
        k, eq, v = e.partition("=")
        if not eq or not k:
            sys.exit(f"longrun: bad --env {e!r} (K=V)")
        extra[k] = v

    try:
        allocs, notes = allocators(opts.vmapalloc, extra)
    except Failure as e:
        sys.exit(f"longrun: {e}")
    for n in list(names):
        need = NEEDS[n] if NEEDS[n].startswith("/") else os.path.join(opts.bindir, NEEDS[n])
        if not os.access(need, os.X_OK):
            if NEEDS[n].startswith("/"):
                notes.append(f"{n}: {need} is not installed, skipped")
                names.remove(n)
            else:
                sys.exit(f"longrun: {need} is missing (ninja -C build)")
    for note in notes:
        print(f"longrun: {note}", file=sys.stderr)

    # runs[workload][allocator] = list of figure rows; results must all match.
    runs = {n: {a.name: [] for a in allocs} for n in names}
    sizes = {n: WORKLOADS[n].sizes(opts.rounds_scale) for n in names}
    first = {}
    linked = {}
    try:
        for rep in range(opts.repeats):
            for n in names:
                k = rep % len(allocs)
                for a in allocs[k:] + allocs[:k]:
                    figs, results = WORKLOADS[n].run(a, sizes[n], opts)
                    if n not in first:
                        first[n] = (a.name, results)
                    elif results != first[n][1]:
                        raise Failure(f"{n}: results differ: {first[n][0]} {first[n][1]} vs "
                                      f"{a.name} {results}")
                    if a.lib is None and figs["linked"]:
                        linked[n] = figs["linked"]
                    runs[n][a.name].append(figs)
                    progress(rep, opts.repeats, n, a.name, figs)
    except Failure as e:
        sys.exit(f"longrun: FAIL: {e}")

    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    order = [a.name for a in allocs]
    md = ["# Footprint over time (bench/longrun.py)", "",
          f"- command: `{' '.join([os.path.relpath(sys.argv[0])] + sys.argv[1:])}`",
          f"- kernel {os.uname().release}, {os.cpu_count()} CPUs, load average at the end {load}",
          f"- medians of {opts.repeats} interleaved repetitions, sizes x{opts.rounds_scale:g}",
          f"- vmapalloc: `{allocs[-1].lib}`"
          + (" with " + " ".join(f"`{k}={v}`" for k, v in extra.items()) if extra else "")]
    md += [f"- {note}" for note in notes] + [""]
    print()
    print("\n".join(md[2:]).replace("`", ""))
    for n in names:
        rows = table(order, runs[n])
        desc = WORKLOADS[n].desc.format(*sizes[n])
        note = f"glibc = no preload: the program links {', '.join(linked[n])} itself" if n in linked else ""
        print(f"== {n}: {desc}")
        if note:
            print(f"   ({note})")
        print(text_table(rows))
        print(flush=True)
        md += [f"## {n}", "", desc + ".", ""] + ([note + ".", ""] if note else []) + [md_table(rows), ""]
    if opts.out:
        os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
        with open(opts.out, "w") as f:
            f.write("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())

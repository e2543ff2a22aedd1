#!/usr/bin/python3
"""bench/programs.py — real programs under each allocator, wall time and peak RSS.

Each workload runs R times under every allocator, interleaved (round-robin,
the first allocator rotated on every repeat); the table gives the median wall
time of each and its ratio to glibc (no preload), and the median peak RSS.
vmapalloc runs with its defaults (BACKEND=auto) and, as a second column, with
VMAPALLOC_BACKEND=libc (the small requests all glibc's).

    bench/programs.py [-r 5] [--lib build/preload/libvmapalloc.so] [--only python3,sort]
    bench/programs.py --backends [-r 5]   # each small backend beside its allocator alone

--backends runs vmapalloc once per VMAPALLOC_BACKEND (libc, builtin, auto,
mimalloc) beside glibc (no preload) and mimalloc preloaded alone, and adds a
table of the pairs that serve small blocks with the same allocator:
VMAPALLOC_BACKEND=libc over glibc alone, VMAPALLOC_BACKEND=mimalloc over
mimalloc alone, per workload and as the geometric mean (1.00 = the same).

Workloads (inputs are generated in a temp dir, deterministic):
  python3   build, serialise and parse a list of 200 000 small dicts, 3 times
  sort      sort -S 64M of 400 000 random lines
  sqlite3   20 000 inserts with an index, then a grouped query
  gcc       gcc -O2 -c of core/slab.c (the compiler allocates a lot of small blocks)
  perl      build and sort a hash of 300 000 strings
Standard library only.
"""

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBDIR = "/usr/lib/x86_64-linux-gnu"
OTHERS = [("mimalloc", LIBDIR + "/libmimalloc.so.2"), ("jemalloc", LIBDIR + "/libjemalloc.so.2"),
          ("tcmalloc", LIBDIR + "/libtcmalloc_minimal.so.4")]

PY = r"""
import json
for k in range(3):
    d = [{'a': i, 'b': str(i) * 5, 'c': [i, i + 1]} for i in range(200000)]
    s = json.dumps(d)
    e = json.loads(s)
print(len(s), len(e))
"""
PERL = r"""
my %h; for my $i (1..300000) { $h{"k$i" x 3} = [$i, "v$i"]; }
my @k = sort keys %h; print scalar(@k), "\n";
"""


def workloads(tmp):
    lines = os.path.join(tmp, "lines.txt")
    with open(lines, "w") as f:
        x = 12345
        for i in range(400000):
            x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            f.write("%016x %d\n" % (x, i))
    sql = os.path.join(tmp, "ins.sql")
    with open(sql, "w") as f:
        f.write("create table t(a integer, b text, c integer); create index ti on t(b);\n"
                "begin;\n")
        for i in range(20000):
            f.write("insert into t values(%d, 'name%d', %d);\n" % (i, i % 997, i * 7 % 101))
        f.write("commit;\nselect c, count(*), sum(a) from t group by c order by c limit 5;\n")
    return {
        "python3": ["python3", "-c", PY],
        "sort": ["sort", "-S", "64M", lines],
        "sqlite3": ["sh", "-c", "rm -f %s/db && sqlite3 %s/db < %s" % (tmp, tmp, sql)],
        "gcc": ["gcc", "-O2", "-I" + os.path.join(ROOT, "core"), "-I" + os.path.join(ROOT, "include"),
                "-D_GNU_SOURCE", "-c", os.path.join(ROOT, "core", "slab.c"), "-o",
                os.path.join(tmp, "range.o")],
        "perl": ["perl", "-e", PERL],
    }


def build_runner(tmp):
    """Compiles bench/runner.c into tmp: the workloads run under it, since
    Python's own wait4 would report at least Python's peak RSS (Linux carries
    the peak RSS of the process that forks across exec)."""
    runner = os.path.join(tmp, "runner")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-Wall", "-Wextra", "-Werror",
                    os.path.join(ROOT, "bench", "runner.c"), "-o", runner], check=True)
    return runner


def run(cmd, env, runner, tmp):
    """Wall seconds, peak RSS (KiB: the workload's own, from the runner's
    wait4) and stdout."""
    res = os.path.join(tmp, "result")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.run([runner, res] + cmd, env=env, stdout=out, stderr=err)
        out.seek(0)
        err.seek(0)
        with open(res) as f:
            kv = dict(t.split("=", 1) for t in f.read().split())
        os.unlink(res)
        if p.returncode != 0 or int(kv["status"]) != 0:
            raise SystemExit("failed: %s: %s" % (" ".join(cmd[:2]), err.read()[-300:]))
        if b"vmapalloc: VMAPALLOC_BACKEND=" in err.read():
            raise SystemExit("%s: the backend asked for (%s) was not used" %
                             (" ".join(cmd[:2]), env.get("VMAPALLOC_BACKEND")))
        return float(kv["wall"]), int(kv["maxrss_kib"]), out.read()


def print_pairs(pairs, names, medians):
    """Each vmapalloc backend over the allocator it hands small blocks to."""
    print("\nmedian wall time of vmapalloc over the same small allocator alone "
          "(1.00 = the same; geometric mean in the last row)")
    head = ["workload"] + ["%s / %s" % p for p in pairs]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    logs = {p: [] for p in pairs}
    for w in names:
        cells = []
        for p in pairs:
            r = medians[(w, p[0])] / medians[(w, p[1])]
            logs[p].append(math.log(r))
            cells.append("%.3f" % r)
        print("| %s | %s |" % (w, " | ".join(cells)))
    print("| geometric mean | %s |" % " | ".join(
        "%.3f" % math.exp(sum(logs[p]) / len(logs[p])) for p in pairs), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-r", "--repeats", type=int, default=5)
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "preload", "libvmapalloc.so"))
    ap.add_argument("--only", help="comma list of workloads")
    ap.add_argument("--backends", action="store_true",
                    help="vmapalloc under each small backend beside glibc and mimalloc alone")
    a = ap.parse_args()
    allocs = [("glibc", None, {}), ("vmapalloc", a.lib, {}),
              ("vmapalloc-libc", a.lib, {"VMAPALLOC_BACKEND": "libc"})]
    allocs += [(n, p, {}) for n, p in OTHERS if os.path.exists(p)]
    pairs = []
    if a.backends:
        mi = OTHERS[0][1]
        allocs = [("glibc", None, {}),
                  ("vmapalloc-libc", a.lib, {"VMAPALLOC_BACKEND": "libc"}),
                  ("mimalloc", mi, {}),
                  ("vmapalloc-mimalloc", a.lib, {"VMAPALLOC_BACKEND": "mimalloc"}),
                  ("vmapalloc-builtin", a.lib, {"VMAPALLOC_BACKEND": "builtin"}),
                  ("vmapalloc-auto", a.lib, {"VMAPALLOC_BACKEND": "auto"})]
        pairs = [("vmapalloc-libc", "glibc"), ("vmapalloc-mimalloc", "mimalloc")]
    medians = {}
    tmp = tempfile.mkdtemp(prefix="vmap-programs.")
    try:
        wl = workloads(tmp)
        runner = build_runner(tmp)
        names = a.only.split(",") if a.only else list(wl)
        print("bench/programs.py -r %d: median wall seconds (ratio to glibc; < 1 is faster), "
              "median peak RSS MiB; load %s" % (a.repeats, os.getloadavg()[:3]))
        head = ["workload"] + [n for n, _, _ in allocs]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for w in names:
            cmd = wl[w]
            res = {n: [] for n, _, _ in allocs}
            outs = {}
            for rep in range(a.repeats):
                k = rep % len(allocs)
                for n, lib, extra in allocs[k:] + allocs[:k]:
                    env = {k2: v for k2, v in os.environ.items()
                           if not k2.startswith("VMAPALLOC_") and k2 != "LD_PRELOAD"}
                    if lib:
                        env["LD_PRELOAD"] = lib
                    env.update(extra)
                    wall, rss, out = run(cmd, env, runner, tmp)
                    res[n].append((wall, rss))
                    outs.setdefault(out, []).append(n)
            if len(outs) != 1:
                raise SystemExit("%s: outputs differ between allocators: %s" % (w, list(outs.values())))
            base = statistics.median(x[0] for x in res["glibc"])
            cells = []
            for n, _, _ in allocs:
                m = statistics.median(x[0] for x in res[n])
                lo = min(x[0] for x in res[n])
                hi = max(x[0] for x in res[n])
                rss = statistics.median(x[1] for x in res[n]) / 1024
                cells.append("%.3f (%.2fx; %.3f-%.3f) %.0f MiB" % (m, m / base, lo, hi, rss))
                medians[(w, n)] = m
            print("| %s | %s |" % (w, " | ".join(cells)), flush=True)
        if pairs:
            print_pairs(pairs, names, medians)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

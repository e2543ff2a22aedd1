#!/usr/bin/env python3
"""bench/startup.py — the start-up cost of a preloaded allocator.

An LD_PRELOAD allocator is loaded into every process of a shell script, a
build, a test suite, so what it costs a process that does almost nothing
matters.  For each program (/bin/true, sh -c :, bench/tiny: 100 allocations of
16 B..128 KiB and their frees) and each allocator (none, vmapalloc, mimalloc,
jemalloc, tcmalloc) this starts N short processes one after the other
(posix_spawn + waitpid), in rounds of --batch processes in which every
allocator takes its turn, and measures

  wall   elapsed time for the N processes (driver included, the same for all)
  cpu    user + system time of the N children (getrusage(RUSAGE_CHILDREN))
  minflt minor page faults per process

Totals are the medians of the repeats; the overhead over no preload (ms per
process, and % of a process without preload) is the median over rounds of the
difference between the allocator's batch and the no-preload batch of the same
round, which cancels most of the drift of a shared machine's load.

Wall time on a shared 2-CPU machine is noisy, so counts that do not depend
on the load are added (skip them with --no-callgrind, --no-perf):

  instructions  of one run (valgrind --tool=callgrind, user space, ld.so and
                the preloaded library included)
  syscalls      system calls, page faults and task-clock per process
                (perf stat -r K -e raw_syscalls:sys_enter,page-faults,task-clock)

Goal: vmapalloc's overhead over no preload is at most half of the
lowest among mimalloc, jemalloc and tcmalloc.  It is judged on time (wall and
cpu); instructions and system calls are shown beside it as diagnostics.

    bench/startup.py                       # 2000 x 3 programs x 5 allocators x 3 repeats
    bench/startup.py -n 500 -r 1 --no-callgrind --no-perf   # quick
    bench/startup.py --vmapalloc /tmp/libvmapalloc.so --out bench/results/startup.md
    bench/startup.py --extra vmap+unwind=build/preload/libvmapalloc.so:/usr/lib/x86_64-linux-gnu/libunwind.so.8

--extra NAME=LIB[:LIB...] adds a column (a variant build, or what an extra
NEEDED library would cost); extras are reported but not part of the goal.
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIBDIR = "/usr/lib/x86_64-linux-gnu"
ALLOCATORS = {
    "none": None,
    "vmapalloc": os.path.join(ROOT, "build/preload/libvmapalloc.so"),
    "mimalloc": f"{LIBDIR}/libmimalloc.so.2",
    "jemalloc": f"{LIBDIR}/libjemalloc.so.2",
    "tcmalloc": f"{LIBDIR}/libtcmalloc_minimal.so.4",
}
OTHERS = ("mimalloc", "jemalloc", "tcmalloc")


def programs(tiny):
    return {
        "true": ["/bin/true"],
        "sh -c :": ["/bin/sh", "-c", ":"],
        "tiny": [tiny],
    }


def env_for(lib, base):
    env = {k: v for k, v in base.items() if k != "LD_PRELOAD" and not k.startswith("VMAPALLOC_")}
    if lib:
        env["LD_PRELOAD"] = lib
    return env


def check_preload(name, lib, base_env):
    """The library is really mapped into the child (a preload that failed is
    only a warning from ld.so, and the run would measure nothing)."""
    if not lib:
        return True
    out = subprocess.run(["/bin/cat", "/proc/self/maps"], env=env_for(lib, base_env),
                         capture_output=True, text=True)
    ok = out.returncode == 0
    for one in lib.split(":"):
        ok = ok and (os.path.realpath(one) in out.stdout or one in out.stdout)
    if not ok:
        print(f"startup: {name}: {lib} is not mapped into the child: {out.stderr.strip()}",
              file=sys.stderr)
    return ok


def run_batch(argv, env, n):
    """n processes one after the other: (wall s, cpu s, minflt, failures)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    fails = 0
    path = argv[0]
    t0 = time.perf_counter()
    for _ in range(n):
        pid = os.posix_spawn(path, argv, env)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            fails += 1
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return t1 - t0, cpu, r1.ru_minflt - r0.ru_minflt, fails


def callgrind_ir(argv, env):
    """Instructions of one run under callgrind (user space, ld.so included)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, "--trace-children=no"]
        p = subprocess.run(cmd + argv, env=env, capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(out):
            return None
        with open(out) as f:
            for line in f:
                if line.startswith("summary:") or line.startswith("totals:"):
                    return int(line.split()[1])
    return None


def perf_counts(argv, env, reps):
    """Mean system calls, page faults and task-clock ms per process."""
    cmd = ["perf", "stat", "-x,", "-r", str(reps), "-e",
           "raw_syscalls:sys_enter,page-faults,task-clock", "--"] + argv
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return None
    vals = {}
    for line in p.stderr.splitlines():
        f = line.split(",")
        if len(f) >= 3:
            try:
                vals[f[2]] = float(f[0])
            except ValueError:
                pass
    return (vals.get("raw_syscalls:sys_enter"), vals.get("page-faults"), vals.get("task-clock"))


def fmt_pct(over, base):
    return f"{100.0 * over / base:+.1f}%" if base > 0 else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=2000, help="processes per cell (2000)")
    ap.add_argument("-r", "--repeats", type=int, default=3, help="interleaved repeats (3)")
    ap.add_argument("--batch", type=int, default=50,
                    help="processes per allocator per round: the unit of interleaving (50)")
    ap.add_argument("--allocators", default="none,vmapalloc,mimalloc,jemalloc,tcmalloc")
    ap.add_argument("--programs", default="true,sh -c :,tiny")
    ap.add_argument("--vmapalloc", default=ALLOCATORS["vmapalloc"], help="the vmapalloc library")
    ap.add_argument("--tiny", default=os.path.join(ROOT, "build/bench/tiny"))
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--perf-repeats", type=int, default=200)
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=LIB[:LIB]",
                    help="one more preload to measure (repeatable)")
    ap.add_argument("--out", help="also write the report (markdown) to this file")
    a = ap.parse_args()

    ALLOCATORS["vmapalloc"] = a.vmapalloc
    for e in a.extra:
        name, eq, lib = e.partition("=")
        if not eq or not name or not lib or name in ALLOCATORS:
            sys.exit(f"startup: bad --extra {e!r} (NAME=LIB[:LIB], a new name)")
        ALLOCATORS[name] = lib
    named = [x.strip() for x in a.allocators.split(",")]
    a.allocators = ",".join(named + [e.partition("=")[0] for e in a.extra
                                     if e.partition("=")[0] not in named])
    base_env = dict(os.environ)
    progs = programs(a.tiny)
    prog_names = [p.strip() for p in a.programs.split(",") if p.strip()]
    for p in prog_names:
        if p not in progs:
            sys.exit(f"startup: unknown program {p!r} (true, sh -c :, tiny)")
        if not os.access(progs[p][0], os.X_OK):
            sys.exit(f"startup: {progs[p][0]} is missing (meson compile -C build tiny)")
    allocs = []
    for name in a.allocators.split(","):
        name = name.strip()
        lib = ALLOCATORS.get(name, "?")
        if lib == "?":
            sys.exit(f"startup: unknown allocator {name!r}")
        missing = [x for x in (lib or "").split(":") if x and not os.path.exists(x)]
        if missing:
            print(f"startup: {name}: {' '.join(missing)} not found, skipped", file=sys.stderr)
            continue
        if not check_preload(name, lib, base_env):
            continue
        allocs.append(name)
    if "none" not in allocs:
        sys.exit("startup: 'none' is needed as the baseline")

    lines = []

    def out(s=""):
        print(s, flush=True)
        lines.append(s)

    with open("/proc/loadavg") as f:
        load = f.read().strip()
    out(f"# Start-up cost: {a.n} processes per cell, {a.repeats} interleaved repeats, median")
    out()
    out(f"- command: `{' '.join([os.path.relpath(sys.argv[0])] + sys.argv[1:])}`")
    out(f"- kernel {os.uname().release}, {os.cpu_count()} CPUs, load average at start {load}")
    for n in allocs:
        if ALLOCATORS[n]:
            out(f"- {n}: `{ALLOCATORS[n]}`")
    out()

    # ---- timed batches ----
    # Each cell's N processes are split into rounds of --batch; in every round
    # each allocator runs one batch (order rotating), so that a change of the
    # machine's load hits all allocators alike.  The overhead is the median
    # over rounds of (batch under the allocator - batch without preload), the
    # "paired" estimate; totals are sums over the rounds.
    rounds = max(1, (a.n + a.batch - 1) // a.batch)
    sizes = [min(a.batch, a.n - k * a.batch) for k in range(rounds)]
    wall = {(p, al): [] for p in prog_names for al in allocs}
    cpu = {(p, al): [] for p in prog_names for al in allocs}
    flt = {(p, al): [] for p in prog_names for al in allocs}
    pw = {(p, al): [] for p in prog_names for al in allocs}  # paired overhead per process, per repeat
    pc = {(p, al): [] for p in prog_names for al in allocs}
    failures = 0
    med = statistics.median
    for rep in range(a.repeats):
        for p in prog_names:
            per = {al: [] for al in allocs}
            for k in range(rounds):
                sh = (rep * rounds + k) % len(allocs)
                for al in allocs[sh:] + allocs[:sh]:
                    w, c, m, f = run_batch(progs[p], env_for(ALLOCATORS[al], base_env), sizes[k])
                    per[al].append((w, c, m))
                    if f:
                        print(f"startup: {p} under {al}: {f} of {sizes[k]} processes failed",
                              file=sys.stderr)
                        failures += f
            for al in allocs:
                wall[(p, al)].append(sum(x[0] for x in per[al]))
                cpu[(p, al)].append(sum(x[1] for x in per[al]))
                flt[(p, al)].append(sum(x[2] for x in per[al]) / a.n)
                pw[(p, al)].append(med([(x[0] - y[0]) / n for x, y, n in zip(per[al], per["none"], sizes)]))
                pc[(p, al)].append(med([(x[1] - y[1]) / n for x, y, n in zip(per[al], per["none"], sizes)]))
        print(f"startup: repeat {rep + 1}/{a.repeats} done", file=sys.stderr, flush=True)

    verdicts = []
    for metric, data, paired, unit in (("wall", wall, pw, "elapsed, driver included"),
                                       ("cpu", cpu, pc, "user+sys of the children")):
        out(f"## {metric}: ms per {a.n} processes ({unit}), median of {a.repeats}; "
            f"overhead per process: median of paired rounds of {a.batch}")
        out()
        out("| program | allocator | ms per %d | repeats (ms) | overhead ms/process | overhead %% |" % a.n)
        out("|---|---|---:|---|---:|---:|")
        for p in prog_names:
            base = med(data[(p, "none")]) * 1000
            per_proc = base / a.n
            over = {}
            for al in allocs:
                v = med(data[(p, al)]) * 1000
                runs = " ".join(f"{x * 1000:.0f}" for x in data[(p, al)])
                o = med(paired[(p, al)]) * 1000
                over[al] = o
                out(f"| {p} | {al} | {v:.0f} | {runs} | {o:+.4f} | {fmt_pct(o, per_proc)} |")
            verdicts.append((metric, p, over))
        out()

    out(f"## minor page faults per process (median of repeats)")
    out()
    out("| program | " + " | ".join(allocs) + " |")
    out("|---|" + "---:|" * len(allocs))
    for p in prog_names:
        out(f"| {p} | " + " | ".join(f"{med(flt[(p, al)]):.1f}" for al in allocs) + " |")
    out()

    # ---- load-independent counts ----
    if not a.no_callgrind and shutil.which("valgrind"):
        out("## instructions of one run (callgrind: user space, ld.so and the allocator included)")
        out()
        out("| program | allocator | instructions | over no preload |")
        out("|---|---|---:|---:|")
        for p in prog_names:
            base = None
            over = {}
            for al in allocs:
                ir = callgrind_ir(progs[p], env_for(ALLOCATORS[al], base_env))
                if ir is None:
                    out(f"| {p} | {al} | (callgrind failed) | |")
                    continue
                if al == "none":
                    base = ir
                o = ir - base if base is not None else None
                if o is not None:
                    over[al] = o
                out(f"| {p} | {al} | {ir:,} | {'' if o is None else f'{o:+,} ({fmt_pct(o, base)})'} |")
            verdicts.append(("instructions", p, over))
        out()
    if not a.no_perf and shutil.which("perf"):
        out(f"## system calls, page faults and task-clock per process (perf stat -r {a.perf_repeats}, mean)")
        out()
        out("| program | allocator | syscalls | page faults | task-clock ms |")
        out("|---|---|---:|---:|---:|")
        for p in prog_names:
            sc_over = {}
            base = None
            for al in allocs:
                r = perf_counts(progs[p], env_for(ALLOCATORS[al], base_env), a.perf_repeats)
                if r is None or r[0] is None:
                    out(f"| {p} | {al} | (perf failed) | | |")
                    continue
                if al == "none":
                    base = r
                if base:
                    sc_over[al] = r[0] - base[0]
                out(f"| {p} | {al} | {r[0]:.1f} | {r[1]:.1f} | {r[2]:.3f} |")
            verdicts.append(("syscalls", p, sc_over))
        out()

    out("## goal: vmapalloc's overhead <= half of the lowest of mimalloc, jemalloc, tcmalloc")
    out()
    out("| metric | program | vmapalloc | lowest other | limit | met |")
    out("|---|---|---:|---:|---:|---|")
    all_met = True
    for metric, p, over in verdicts:
        others = [(over[o], o) for o in OTHERS if o in over]
        if "vmapalloc" not in over or not others:
            continue
        low, who = min(others)
        limit = low / 2
        met = over["vmapalloc"] <= limit
        timed = metric in ("wall", "cpu")
        if timed:
            all_met &= met
        unit = "ms" if timed else ""
        name = metric if timed else metric + " (diagnostic)"
        out(f"| {name} | {p} | {over['vmapalloc']:+.4g}{unit} | {low:+.4g}{unit} ({who}) | "
            f"{limit:+.4g}{unit} | {'yes' if met else 'NO'} |")
    out()
    out(f"goal met on time (wall and cpu, every program): {'yes' if all_met else 'no'}; "
        f"failed processes: {failures}")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

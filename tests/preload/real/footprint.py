#!/usr/bin/python3
"""real-footprint-python, real-footprint-ruby: vmapalloc must not multiply
a long-running program's mappings.

    footprint.py [python|ruby]

Runs bench/longrun.py's `python` workload at full size (/usr/bin/python3: 40
rounds of 100 000 small dicts through json.dumps, then 200 fork + waitpid), or
its `ruby` workload (/usr/bin/ruby: 20 rounds of 200 000 strings, dropped and
collected; Ruby maps its heap pages itself and unmaps what is past their
alignment, in small pieces), under glibc (no preload), under each of
mimalloc, jemalloc and tcmalloc that
is installed (the peers), and under vmapalloc ($VMTEST_LIB), with the same
measurement as the benchmark: the peak is the most lines of /proc/PID/maps
seen by a sampler every 2 ms, or the workload's own count at its end.  The
workload's results must be the same under every allocator.

Fails if vmapalloc's peak exceeds max(2 x P, P + 64), P the highest peak of
the peers (glibc included): a mapping per allocation, or per freed block,
makes thousands where the others need well under a hundred, and costs every
fork and every page fault's VMA lookup.  All the counts compared are printed.

Like the other real-program tests (lib.sh): the interpreter missing is a
skip (exit 77), a failure in CI (CI set) or with REAL_REQUIRE_PROGRAMS=1.
VMAPALLOC_* variables of the environment are passed to the vmapalloc run.
"""
import importlib.util
import os
import sys

WORKLOAD = sys.argv[1] if len(sys.argv) > 1 else "python"
NAME = "real-footprint-" + WORKLOAD
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def log(msg):
    print(f"[{NAME}] {msg}", flush=True)


def fail(msg):
    log(f"FAIL: {msg}")
    sys.exit(1)


def load_longrun():
    sys.dont_write_bytecode = True   # no __pycache__ in the source tree
    spec = importlib.util.spec_from_file_location("longrun", os.path.join(ROOT, "bench", "longrun.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    longrun = load_longrun()
    if WORKLOAD not in ("python", "ruby"):
        fail(f"unknown workload {WORKLOAD!r} (python or ruby)")
    program = longrun.PYTHON if WORKLOAD == "python" else longrun.RUBY
    if not os.access(program, os.X_OK):
        if os.environ.get("CI") or os.environ.get("REAL_REQUIRE_PROGRAMS") == "1":
            fail(f"not installed: {program} (run scripts/deps)")
        log(f"SKIP: not installed: {program}")
        return 77
    lib = os.environ.get("VMTEST_LIB") or os.environ.get("VMAPALLOC_LIB")
    if not lib:
        fail("VMTEST_LIB is not set (run through 'meson test')")
    vm_env = {k: v for k, v in os.environ.items() if k.startswith("VMAPALLOC_") and k != "VMAPALLOC_LIB"}
    try:
        allocs, notes = longrun.allocators(lib, vm_env)
    except longrun.Failure as e:
        fail(str(e))
    log(f"library: {allocs[-1].lib}" + (f" with {vm_env}" if vm_env else ""))
    for note in notes:
        log(note)

    figs, first = {}, None
    for a in allocs:
        try:
            if WORKLOAD == "python":
                f, results = longrun.python_workload(a, rounds=40, forks=200)
            else:
                f, results = longrun.ruby_workload(a, rounds=20)
        except longrun.Failure as e:
            fail(str(e))
        if first is None:
            first = (a.name, results)
        elif results != first[1]:
            fail(f"results differ: {first[0]} {first[1]}, {a.name} {results}")
        figs[a.name] = f
        fork = f"fork+wait {f['fork_us']:7.0f} µs  " if f.get("fork_us") is not None else ""
        log(f"{a.name:<9} maps peak {f['maps_peak']:>6}  end {f['maps_end']:>6}  "
            f"{fork}peak RSS {f['rss_peak_mb']:6.1f} MB  ({f['wall_s']:.1f} s)")

    peers = {n: f["maps_peak"] for n, f in figs.items() if n != "vmapalloc"}
    top = max(peers, key=peers.get)
    limit = max(2 * peers[top], peers[top] + 64)
    vm = figs["vmapalloc"]["maps_peak"]
    log(f"peak mappings: vmapalloc {vm}; peers " + ", ".join(f"{n} {c}" for n, c in peers.items())
        + f"; highest peer {top} {peers[top]}; limit max(2 x {peers[top]}, {peers[top]} + 64) = {limit}")
    if vm > limit:
        fail(f"vmapalloc's peak of {vm} mappings exceeds {limit} (x{vm / peers[top]:.1f} {top}'s)")
    log(f"PASS: vmapalloc {vm} <= {limit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

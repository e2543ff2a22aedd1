#!/usr/bin/python3
"""collapsed_check.py TOOL SITES_PROG OUTDIR

`vmapalloc-report --collapsed` of a program whose sites are known
(sites_prog.c: three functions that allocate fixed byte counts): each
function's stack is one line whose weight is exactly its bytes, root first
(main before it), with file:line from addr2line; the live file holds the
kept blocks only.  The driver sets LD_PRELOAD for the program from VMTEST_LIB.
Exits 1 with one line per failed check.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

failures = []


def ok(cond, what):
    if not cond:
        failures.append(what)
    return cond


def parse(path):
    out = []
    with open(path) as f:
        for line in f:
            stack, _, w = line.rstrip("\n").rpartition(" ")
            if ok(stack and w.isdigit(), "not a collapsed line: %r" % line):
                out.append((stack.split(";"), int(w)))
    return out


def lines_of(parsed, func):
    return [(frames, w) for frames, w in parsed if frames[-1].split(" ")[0] == func]


def main():
    tool, prog, outdir = sys.argv[1:4]
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    env = dict(os.environ, LD_PRELOAD=os.environ["VMTEST_LIB"], VMAPALLOC_PROFILE="1",
               VMAPALLOC_PROFILE_LARGE_SAMPLE="0", VMAPALLOC_STATS_FORMAT="json",
               VMAPALLOC_STATS=os.path.join(outdir, "r-%p.json"))
    r = subprocess.run([prog], capture_output=True, text=True, env=env, timeout=120)
    if r.returncode:
        sys.exit("collapsed_check: %s exited %d: %s" % (prog, r.returncode, r.stderr))
    want = json.loads(r.stdout.strip().splitlines()[-1])
    reports = glob.glob(os.path.join(outdir, "r-*.json"))
    if len(reports) != 1:
        sys.exit("collapsed_check: %d reports in %s" % (len(reports), outdir))
    out = os.path.join(outdir, "profile.collapsed")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([tool, "--collapsed", "-o", out, reports[0]], capture_output=True, text=True, env=env,
                       timeout=300)
    if r.returncode:
        sys.exit("collapsed_check: %s failed: %s" % (tool, r.stderr))
    live = os.path.join(outdir, "profile-live.collapsed")
    if not os.path.isfile(live):
        sys.exit("collapsed_check: no %s" % live)
    allocated, kept = parse(out), parse(live)
    for func in ("make_kept", "make_freed", "make_big"):
        found = lines_of(allocated, func)
        if ok(len(found) == 1, "%s: %d stacks, want 1" % (func, len(found))):
            frames, w = found[0]
            ok(w == want[func], "%s: weight %d, want %d" % (func, w, want[func]))
            ok(len(frames) >= 2 and frames[-2].startswith("main"), "%s: caller %r, want main (root first)" %
               (func, frames[-2:]))
            ok("sites_prog.c:" in frames[-1], "%s: no file:line in %r" % (func, frames[-1]))
            print("%s %d" % (";".join(frames[-2:]), w))
    found = lines_of(kept, "make_kept")
    if ok(len(found) == 1, "live: %d make_kept stacks, want 1" % len(found)):
        ok(found[0][1] == want["live"], "live: make_kept weight %d, want %d" % (found[0][1], want["live"]))
    for func in ("make_freed", "make_big"):
        ok(not lines_of(kept, func), "live: %s is listed, but all its blocks were freed" % func)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

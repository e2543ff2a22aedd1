#!/bin/sh
# diff.sh [--self | --preload-only | --stats] DIFF_EXE [--case NAME]...
#
# Driver of the mmap differential harness (diff.c).
#
#   (default)       run DIFF_EXE plainly (the kernel's mmap family: the oracle)
#                   and with LD_PRELOAD=$VMTEST_LIB, and compare the two
#                   transcripts case by case.  Any difference fails, naming the
#                   case and showing its transcript diff.  stderr is merged into
#                   the transcript, so a diagnostic the preload prints during a
#                   case is a difference of that case.  If the preloaded run dies,
#                   the case it died in is reported and every case after it is
#                   run on its own, so one crash does not hide the rest.
#   --self          run DIFF_EXE plainly twice: the transcripts must be equal
#                   (the harness is deterministic).
#   --preload-only  run DIFF_EXE --preload-only under the preload; it must pass.
#   --stats         run DIFF_EXE under the preload with a JSON report and check
#                   that its counters mmap_served (> 0), mmap_passed,
#                   munmap_partial and mremap_calls exist; exit 77 (skip) with
#                   "SKIP: counters not present yet" while they do not.
#
# Only LD_PRELOAD is passed to the program (VMTEST_LIB is removed: vmapalloc
# warns about unknown VMAPALLOC_* variables, and it names a file, not an option).
#
# Exit status: 0 pass, 1 difference or failure, 77 skip (--stats only),
# 99 set-up error (no program, no library, python3 missing).
set -u

command -v python3 >/dev/null 2>&1 || { echo "ERROR: python3 is needed"; exit 99; }

VMTEST_DIFF_DIR=$(cd "$(dirname "$0")" && pwd) exec python3 - "$@" <<'PYEOF'
import difflib, glob, json, os, re, shutil, signal, subprocess, sys, tempfile

RUN_TIMEOUT = 600           # seconds for one run of the whole program
CASE_TIMEOUT = 120          # seconds for one case run alone

def die(msg, code=99):
    print(msg)
    sys.exit(code)

args = sys.argv[1:]
mode = "diff"
if args and args[0] in ("--self", "--preload-only", "--stats"):
    mode = args.pop(0)[2:]
if not args:
    die("usage: diff.sh [--self | --preload-only | --stats] DIFF_EXE [--case NAME]...")
exe, extra = os.path.abspath(args[0]), args[1:]
if not os.access(exe, os.X_OK):
    die("ERROR: %s is not an executable" % exe)

lib = os.environ.get("VMTEST_LIB", "")
if mode != "self":
    if not lib:
        die("ERROR: VMTEST_LIB must name the library to preload")
    if not os.path.isfile(lib):
        die("ERROR: VMTEST_LIB=%s does not exist" % lib)
    lib = os.path.abspath(lib)

def env_for(preload, more=None):
    env = dict(os.environ)
    env.pop("VMTEST_LIB", None)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    if more:
        env.update(more)
    return env

def signame(rc):
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return "signal %d" % -rc

def describe(rc):
    if rc is None:
        return "timed out"
    if rc < 0:
        return "killed by %s" % signame(rc)
    return "exit status %d" % rc

def run(preload, argv, timeout, more_env=None):
    """Runs the program; returns (returncode or None on timeout, output text)."""
    try:
        p = subprocess.run([exe] + argv, env=env_for(preload, more_env),
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode("utf-8", "replace") if e.stdout else ""
        return None, out

def sections(text):
    """Ordered list of (case, lines); lines before the first header go to '(start)'."""
    out, cur, lines = [], "(start)", []
    for line in text.splitlines():
        if line.startswith("== "):
            if cur != "(start)" or lines:
                out.append((cur, lines))
            cur, lines = line[3:].strip(), []
        else:
            lines.append(line)
    if cur != "(start)" or lines:
        out.append((cur, lines))
    return out

def exports_mmap(path):
    nm = shutil.which("nm")
    if not nm:
        return None
    try:
        out = subprocess.run([nm, "-D", "--defined-only", path], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = {l.split()[-1] for l in out.splitlines() if l.strip()}
    return {"mmap", "mmap64", "munmap", "mremap"} <= names

def all_cases():
    rc, out = run("", ["--list"], 60)
    if rc != 0:
        die("ERROR: %s --list failed (%s)" % (exe, describe(rc)))
    return [l.split()[0] for l in out.splitlines()
            if l.strip() and "[--preload-only]" not in l]

def show_diff(name, a, b, la, lb):
    print("DIFF: case %s" % name)
    for l in difflib.unified_diff(a, b, la, lb, n=2, lineterm=""):
        print("  " + l)

# ------------------------------------------------------------------ --self
if mode == "self":
    rc1, out1 = run("", extra, RUN_TIMEOUT)
    rc2, out2 = run("", extra, RUN_TIMEOUT)
    if rc1 != 0 or rc2 != 0:
        print("FAIL: plain runs: %s, %s" % (describe(rc1), describe(rc2)))
        sys.exit(1)
    s1, s2 = dict(sections(out1)), dict(sections(out2))
    bad = [n for n in s1 if s1[n] != s2.get(n)] + [n for n in s2 if n not in s1]
    for n in bad:
        show_diff(n, s1.get(n, []), s2.get(n, []), "plain run 1", "plain run 2")
    if bad:
        print("FAIL: the harness is not deterministic: %d case(s) differ between two plain runs" % len(bad))
        sys.exit(1)
    print("ok: two plain runs gave the same transcript (%d cases, %d lines)" % (len(s1), len(out1.splitlines())))
    sys.exit(0)

# --------------------------------------------------------- --preload-only
if mode == "preload-only":
    ex = exports_mmap(lib)
    if ex is False:
        print("FAIL: %s does not export mmap, mmap64, munmap and mremap: vmapalloc's mmap "
              "interposition is not there yet, so its own memory is not protected" % lib)
        sys.exit(1)
    rc, out = run(lib, ["--preload-only"] + extra, RUN_TIMEOUT)
    sys.stdout.write(out)
    if rc != 0:
        print("FAIL: preload-only cases: %s" % describe(rc))
        sys.exit(1)
    sys.exit(0)

# ------------------------------------------------------------------ --stats
KEYS = ["mmap_served", "mmap_passed", "munmap_partial", "mremap_calls"]
if mode == "stats":
    tmp = tempfile.mkdtemp(prefix="mmapstats.")
    try:
        pat = os.path.join(tmp, "s-%p.json")
        rc, out = run(lib, extra, RUN_TIMEOUT,
                      {"VMAPALLOC_STATS": pat, "VMAPALLOC_STATS_FORMAT": "json"})
        if rc != 0:
            print("FAIL: the program under the preload: %s" % describe(rc))
            print("\n".join(out.splitlines()[-20:]))
            sys.exit(1)
        files = sorted(glob.glob(os.path.join(tmp, "s-*.json")))
        reports = []
        for f in files:
            try:
                with open(f) as fh:
                    reports.append((f, json.load(fh)))
            except (OSError, ValueError) as e:
                print("FAIL: %s is not valid JSON: %s" % (os.path.basename(f), e))
                sys.exit(1)
        # The main process's report: the one no other report names as parent
        # (children that exit normally may write their own).
        main = [r for r in reports if not r[1].get("parent_pid")] or reports
        if not main:
            print("FAIL: no report was written (VMAPALLOC_STATS=%s)" % pat)
            sys.exit(1)
        f, rep = main[0]
        ctr = rep.get("counters", {})
        def get(k):
            if k in ctr:
                return ctr[k]
            return rep.get(k)
        missing = [k for k in KEYS if get(k) is None]
        if missing:
            print("SKIP: counters not present yet: vmapalloc's JSON report (%s) has no %s"
                  % (os.path.basename(f), ", ".join(missing)))
            sys.exit(77)
        vals = {k: get(k) for k in KEYS}
        print("counters: " + ", ".join("%s=%s" % (k, vals[k]) for k in KEYS))
        bad = [k for k in KEYS if not isinstance(vals[k], int) or vals[k] < 0]
        if bad:
            print("FAIL: not non-negative integers: %s" % ", ".join(bad))
            sys.exit(1)
        if vals["mmap_served"] <= 0:
            print("FAIL: mmap_served is 0: no anonymous mmap of the harness was served by vmapalloc")
            sys.exit(1)
        # Every case munmaps part of some served mapping and calls mremap.
        if vals["munmap_partial"] <= 0 or vals["mremap_calls"] <= 0:
            print("FAIL: munmap_partial and mremap_calls must count the harness's partial "
                  "munmaps and mremaps")
            sys.exit(1)
        print("ok: stats counters present and counting")
        sys.exit(0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

# -------------------------------------------------------------------- diff
ex = exports_mmap(lib)
if ex is False:
    print("NOTE: %s does not export all of mmap, mmap64, munmap and mremap: the preloaded run "
          "uses the kernel's calls for the others"
          % os.path.basename(lib))

rc_k, out_k = run("", extra, RUN_TIMEOUT)
if rc_k != 0:
    print("ERROR: the plain run (the oracle) failed: %s" % describe(rc_k))
    print("\n".join(out_k.splitlines()[-20:]))
    sys.exit(99)
kern = sections(out_k)
kd = dict(kern)
order = [n for n, _ in kern]

rc_v, out_v = run(lib, extra, RUN_TIMEOUT)
pre = sections(out_v)
vd = dict(pre)

died_in = None
if rc_v != 0:
    died_in = pre[-1][0] if pre else "(start)"
    print("FAIL: the preloaded run %s in case %s" % (describe(rc_v), died_in))
    # Run every case that did not complete, one at a time.
    for n in order[order.index(died_in) + 1 if died_in in order else 0:]:
        if n == "(start)":
            continue
        rc1, out1 = run(lib, ["--case", n], CASE_TIMEOUT)
        s = dict(sections(out1))
        lines = s.get(n, [])
        if rc1 != 0:
            lines = lines + ["(run alone: %s)" % describe(rc1)]
        vd[n] = lines
    vd[died_in] = vd.get(died_in, []) + ["(the whole run %s here)" % describe(rc_v)]

differ = []
for n in order + [n for n in vd if n not in kd]:
    if kd.get(n) != vd.get(n):
        differ.append(n)

# Tell whether each difference depends on the cases run before it.
alone = {}
if differ and len(differ) <= 40:
    for n in differ:
        if n == "(start)" or n not in kd:
            continue
        r1, o1 = run("", ["--case", n], CASE_TIMEOUT)
        r2, o2 = run(lib, ["--case", n], CASE_TIMEOUT)
        a, b = dict(sections(o1)).get(n), dict(sections(o2)).get(n)
        if r2 != 0:
            b = (b or []) + ["(run alone: %s)" % describe(r2)]
        alone[n] = "also when run alone" if a != b else "only after the earlier cases (passes alone)"

for n in differ:
    show_diff(n, kd.get(n, []), vd.get(n, []), "kernel", "preload " + os.path.basename(lib))
    if n in alone:
        print("  (%s)" % alone[n])

known = {}
kfile = os.path.join(os.environ.get("VMTEST_DIFF_DIR", "."), "known-differences.txt")
if os.path.exists(kfile):
    for line in open(kfile):
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, why = line.partition(" ")
            known[name] = why.strip()
for n in known:
    if n not in differ:
        print("NOTE: known difference %s no longer differs: remove it from known-differences.txt" % n)
for n in [n for n in differ if n in known]:
    print("KNOWN: %s: %s" % (n, known[n]))
differ = [n for n in differ if n not in known]

ncases = len([n for n in order if n != "(start)"])
if differ:
    print("FAIL: %d of %d case(s) differ from the kernel: %s" % (len(differ), ncases, " ".join(differ)))
    sys.exit(1)
print("ok: %d cases, transcripts identical with and without %s%s" % (
    ncases, os.path.basename(lib),
    " (but for %d known difference(s))" % len([n for n in known if n in vd and kd.get(n) != vd.get(n)]) if known else ""))
sys.exit(0)
PYEOF

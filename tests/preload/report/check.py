#!/usr/bin/python3
"""check.py SCENARIO DIR — checks the reports report.sh collected in DIR.

DIR holds out.json (what report_prog printed: what it did), the reports
vmapalloc wrote (r-<pid>.json, r-<pid>-sig<N>.json), and err.txt (the
program's stderr).  Every figure of the report that the program determines is
compared with what it did; the rest is checked for sanity.  Exits 1 with one
line per failed check.
"""
import glob
import json
import os
import sys
import xml.etree.ElementTree as ET

KiB, MiB = 1024, 1024 * 1024
failures = []


def ok(cond, what):
    if not cond:
        failures.append(what)
    return cond


def load(path):
    with open(path) as f:
        return json.load(f)


def out(d):
    with open(os.path.join(d, "out.json")) as f:
        return json.loads(f.read().strip().splitlines()[-1])


def report(d, pid, sig=None):
    name = f"r-{pid}-sig{sig}.json" if sig else f"r-{pid}.json"
    path = os.path.join(d, name)
    if not ok(os.path.exists(path), f"no report {name} in {sorted(os.listdir(d))}"):
        sys.exit(finish())
    return load(path)


def site(table, function, kind=None):
    """The first site of a profile table whose innermost frame is function."""
    for s in table:
        if s["frames"] and s["frames"][0]["function"] == function and (kind is None or s["kind"] == kind):
            return s
    return None


def check_figures(r, e, when="exit", pid=None, parent=0):
    c = r["counters"]
    ok(r["vmapalloc_report_version"] == 1, "vmapalloc_report_version is not 1")
    ok(r["when"] == when, f"when = {r['when']}, want {when}")
    if pid is not None:
        ok(r["pid"] == pid, f"pid {r['pid']} != {pid}")
    ok(r["parent_pid"] == parent, f"parent_pid {r['parent_pid']} != {parent}")
    ok(r["program"] == "report_prog", f"program {r['program']!r}")
    # What the program did, large blocks: exact where vmapalloc decides nothing.
    ok(c["large_bytes_allocated"] >= e["large_asked"],
       f"large_bytes_allocated {c['large_bytes_allocated']} < asked {e['large_asked']}")
    ok(c["large_allocs"] >= e["large_allocs"], f"large_allocs {c['large_allocs']} < {e['large_allocs']}")
    ok(c["large_frees"] >= e["large_frees"], f"large_frees {c['large_frees']} < {e['large_frees']}")
    ok(c["large_blocks_in_use"] == e["large_live"],
       f"large_blocks_in_use {c['large_blocks_in_use']} != live {e['large_live']}")
    ok(e["large_live_asked"] <= c["large_bytes_in_use"] <= e["large_live_asked"] + 4096 * e["large_live"],
       f"large_bytes_in_use {c['large_bytes_in_use']} not the {e['large_live_asked']} bytes live (page-rounded)")
    ok(r["large_bytes_in_use"] == c["large_bytes_in_use"], "top-level large_bytes_in_use != counter")
    ok(r["large_blocks_in_use"] == c["large_blocks_in_use"], "top-level large_blocks_in_use != counter")
    ok(r["large_bytes_peak"] >= max(e["large_peak_asked"], c["large_bytes_in_use"]),
       f"large_bytes_peak {r['large_bytes_peak']} < {e['large_peak_asked']}")
    ok(c["large_bytes_peak"] == r["large_bytes_peak"], "counters.large_bytes_peak != large_bytes_peak")
    # Calls: the program's own, plus whatever libc does for stdio (>=).
    for key, want in (("malloc_calls", "mallocs"), ("free_calls", "frees"), ("calloc_calls", "callocs"),
                      ("realloc_calls", "reallocs"), ("memalign_calls", "aligned"),
                      ("small_allocs", "small_allocs"), ("small_frees", "small_frees")):
        ok(c[key] >= e[want], f"{key} {c[key]} < {e[want]} the program made")
    ok(c["small_allocs"] + c["large_allocs"] >= c["malloc_calls"] + c["calloc_calls"] + c["memalign_calls"] - 1,
       "small + large allocations do not cover the malloc/calloc/aligned calls")
    ok(c["pool_hits"] + c["run_hits"] + c["pool_misses"] >= c["large_allocs"],
       "pool hits + runs + fresh < large allocations")
    # What the system says.
    ok(r["resident_bytes"] > 0 and r["resident_peak_bytes"] >= r["resident_bytes"],
       f"resident {r['resident_bytes']} / peak {r['resident_peak_bytes']}")
    ok(r["anon_huge_pages_bytes"] is not None and r["lazy_free_bytes"] is not None,
       "no smaps_rollup figures")
    ok(10 < r["mappings"] <= (r["max_map_count"] or 1 << 40), f"mappings {r['mappings']} / {r['max_map_count']}")
    ok(r["cached_bytes"] == c["cached_bytes"], "cached_bytes != counter")
    ok(r["shards"] == len(r["shard_table"]), "shard_table rows != shards")
    if e["large_allocs"] == 0 and c["mmap_served"] == 0 and c["slabs_made"] == 0:
        # Lazy set-up: no large block, no served mmap, no slab (BACKEND=auto
        # sets slabs up after 65536 small allocations), so no arena, no shard.
        ok(r["mapped_bytes"] < 256 * MiB and r["shards"] == 0 and r["lazy_max_bytes"] == 0,
           f"an arena was set up for small allocations only: mapped {r['mapped_bytes']}, "
           f"{r['shards']} shards")
        ok(c["shard_lock_acquisitions"] == 0, "shard locks taken without an arena")
    else:
        ok(r["mapped_bytes"] >= 256 * MiB, f"mapped_bytes {r['mapped_bytes']}")
        ok(r["lazy_max_bytes"] > 0, "lazy_max_bytes")
        ok(r["shards"] >= 1, "no shard")
        for row in r["shard_table"]:
            ok(all(k in row for k in ("cached_bytes", "pooled_areas", "free_zero_bytes", "free_dirty_bytes")),
               f"shard row keys {sorted(row)}")
        ok(0 <= r["thread_cache_bytes"] <= r["cached_bytes"], "thread_cache_bytes > cached_bytes")
        # Per-shard lock counts add up to the global ones (one thread: exact).
        for mine, total in (("lock_acquisitions", "shard_lock_acquisitions"), ("lock_contended", "shard_lock_contended")):
            ok(sum(row[mine] for row in r["shard_table"]) == c[total],
               f"shards' {mine} sum {sum(row[mine] for row in r['shard_table'])} != {total} {c[total]}")
        ok(c["shard_lock_acquisitions"] > 0, "no shard lock acquisitions counted")
        # Every wait for any lock is counted, the shard locks' among them.
        ok(r["lock_waits"] >= c["shard_lock_contended"] and 0 <= r["lock_sleeps"],
           f"lock_waits {r['lock_waits']} < shard_lock_contended {c['shard_lock_contended']}")
        pooled = sum(row["pooled_areas"] for row in r["shard_table"])
        ok(sum(s["areas"] for s in r["size_table"]) == pooled, "size_table areas != pooled areas of the shards")
    if when == "signal":
        ok(r["small_bytes_in_use"] is None, "glibc figures read in a signal handler")
        ok(r["approximate"] is True, "a signal report is not marked approximate")
    else:
        ok(isinstance(r["small_bytes_in_use"], int) and r["small_bytes_in_use"] > 0, "small_bytes_in_use")
        ok(r["bytes_in_use"] == r["small_bytes_in_use"] + r["slab_bytes_in_use"] + c["large_bytes_in_use"]
           + c["mmap_bytes_in_use"], "bytes_in_use != small + slabs + large + mmap")
    ok(r["counter_mode"] in ("atomic", "percpu"), "counter_mode")
    ok((r["counter_switch_ns"] is None) == (r["counter_mode"] == "atomic"), "counter_switch_ns vs mode")


def check_leak(p, caller="main", first=True):
    """leaky_function's 3 x 1 MiB, at its real call site (first of the live table)."""
    ok(p is not None, "no profile in the report") or sys.exit(finish())
    s = site(p["live"], "leaky_function")
    if not ok(s is not None, "leaky_function not in the live table: "
              + json.dumps([[f["function"] for f in x["frames"][:3]] for x in p["live"]])):
        return
    ok(not first or p["live"][0] is s, "leaky_function is not the largest live site")
    ok(s["kind"] == "large" and not s["estimated"], f"leak site kind {s['kind']}")
    ok(s["live_bytes"] == 3 * MiB and s["live_count"] == 3, f"leak live {s['live_bytes']} in {s['live_count']}")
    ok(s["bytes"] == 3 * MiB and s["count"] == 3, f"leak allocated {s['bytes']} in {s['count']}")
    ok(s["frames"][0]["object"] == "report_prog", f"leak frame object {s['frames'][0]['object']}")
    ok(0 < s["frames"][0]["offset"] < 4096, f"leak frame offset {s['frames'][0]['offset']}")
    ok(len(s["frames"]) > 1 and s["frames"][1]["function"] == caller,
       f"leaky_function called from {s['frames'][1]['function'] if len(s['frames']) > 1 else None}, want {caller}")


def check_known_work_sites(p, small_bytes):
    s = site(p["by_bytes"], "known_work", "large") or site(p["by_count"], "known_work", "large")
    if ok(s is not None, "the 8-block site of known_work is not in the tables"):
        ok(s["count"] == 8 and s["live_count"] == 2, f"known_work large: {s['count']} blocks, {s['live_count']} live")
        ok(s["live_bytes"] == 2 * 256 * KiB + 13 * 4096, f"known_work live bytes {s['live_bytes']}")
        ok(s["live_peak_bytes"] >= 8 * 256 * KiB, f"known_work live peak {s['live_peak_bytes']}")
    for t in ("by_bytes", "by_count", "live"):
        for x in p[t]:
            if x["kind"] == "large" and x["frames"] and x["frames"][0]["function"] not in ("leaky_function",
                                                                                           "known_work"):
                ok(x["live_count"] == 0, f"large site {x['frames'][0]} still live after its free")
    small = site(p["by_bytes"], "known_work", "small") or site(p["by_count"], "known_work", "small")
    if ok(small is not None, "the sampled 100-byte blocks of known_work are not in the tables"):
        ok(small["estimated"], "a sampled site is not marked estimated")
        ok(0.6 * small_bytes <= small["bytes"] <= 1.4 * small_bytes,
           f"small estimate {small['bytes']} bytes, the program allocated {small_bytes}")
        ok(small["live_count"] == 0, f"freed small blocks still live: {small['live_count']}")


def scenario(name, d):
    o = out(d)
    e = o.get("expect", {})
    if name in ("basic", "exit", "ownhandler"):
        r = report(d, o["pid"])
        check_figures(r, e, pid=o["pid"])
        check_leak(r["profile"])
        check_known_work_sites(r["profile"], e["small_bytes"])
        ok(r["profile"]["symbolized"], "exit report not symbolized")
        if name == "ownhandler":
            ok(not glob.glob(os.path.join(d, "*-sig*")), "vmapalloc reported on a signal the program handles")
    elif name == "fork":
        parent = report(d, o["pid"])
        check_figures(parent, e, pid=o["pid"])
        check_leak(parent["profile"])
        child = report(d, o["child"])
        ec = dict(e, large_live=e["large_live"] + 1, large_live_asked=e["large_live_asked"] + 5 * MiB,
                  large_asked=e["large_asked"] + 5 * MiB, large_allocs=e["large_allocs"] + 1,
                  mallocs=e["mallocs"] + 1)
        check_figures(child, ec, pid=o["child"], parent=o["pid"])
        check_leak(child["profile"], first=False) # the child's own 5 MiB comes first
        mine = site(child["profile"]["live"], "main", "large")
        ok(mine is not None and mine["live_bytes"] == 5 * MiB, "the child's own 5 MiB block is not live in its profile")
        ok(len(glob.glob(os.path.join(d, "r-*.json"))) == 2, "not exactly two reports (parent, child)")
    elif name == "signal":
        sig = report(d, o["pid"], sig=1)
        before = dict(e, large_live=2, large_live_asked=2 * 256 * KiB + 13 * 4096, large_asked=e["large_asked"]
                      - 3 * MiB - 2 * MiB, large_allocs=e["large_allocs"] - 4, large_frees=e["large_frees"] - 1,
                      mallocs=e["mallocs"] - 4, frees=e["frees"] - 1)
        check_figures(sig, before, when="signal", pid=o["pid"])
        p = sig["profile"]
        ok(p is not None and not p["symbolized"], "signal report profile: symbolized or missing")
        if p:
            ok(all(f["function"] is None for s in p["by_bytes"] for f in s["frames"]),
               "names in a signal-time profile (dladdr is not async-signal-safe)")
            ok(any(s["frames"] and s["frames"][0]["object"] == "report_prog" for s in p["by_bytes"]),
               "no frame located in report_prog")
        r = report(d, o["pid"])
        check_figures(r, e, pid=o["pid"])
        check_leak(r["profile"])
    elif name == "sampling":
        r = report(d, o["pid"])
        check_figures(r, e, pid=o["pid"])
        p = r["profile"]
        s = site(p["by_bytes"], "main", "small")
        if ok(s is not None, "the sampled site is not in by_bytes"):
            n = e["small_allocs"]
            ok(0.9 * e["small_bytes"] <= s["bytes"] <= 1.1 * e["small_bytes"],
               f"estimated {s['bytes']} bytes, allocated {e['small_bytes']} (samples {s['samples']})")
            ok(0.9 * n <= s["count"] <= 1.1 * n, f"estimated {s['count']} blocks, allocated {n}")
            ok(s["live_count"] == 0 and s["live_bytes"] == 0, f"freed blocks still live: {s['live_count']}")
            ok(p["by_bytes"][0] is s, "the sampled site is not the first by bytes")
    elif name == "threads":
        r = report(d, o["pid"])
        c = r["counters"]
        ok(c["large_blocks_in_use"] == 0, f"large_blocks_in_use {c['large_blocks_in_use']} after every free")
        ok(r["counter_mode"] == "percpu" and r["counter_switch_ns"] is not None, "counters did not switch")
        ok(c["malloc_calls"] >= 80000 and c["free_calls"] >= 80000, "calls of 4 x 20000")
        p = r["profile"]
        ok(p is not None and p["samples"] > 0, "no profile samples")
        for x in p["by_bytes"] + p["by_count"] + p["live"]:
            if x["kind"] == "large":
                ok(x["live_count"] == 0, f"large blocks of {x['frames'][:1]} still live in the profile")
        sigs = glob.glob(os.path.join(d, f"r-{o['pid']}-sig*.json"))
        ok(len(sigs) >= 1, "no report on the signals")
        for f in sigs:
            s = load(f)
            ok(s["when"] == "signal" and s["approximate"], f"{f}: not a signal report")
    elif name == "large_sampling":
        # Large blocks sampled every 1 MiB on average: a 256 KiB block with
        # p = 1 - e^-1/4 = 22%, ~1770 samples of 8000 (sd 2.1%).
        r = report(d, o["pid"])
        check_figures(r, e, pid=o["pid"])
        p = r["profile"]
        ok(p["large_sample_bytes"] == MiB, f"large_sample_bytes {p['large_sample_bytes']}")
        s = site(p["by_bytes"], "main", "large")
        if ok(s is not None, "the sampled large site is not in by_bytes"):
            n = e["large_allocs"]
            ok(s["estimated"], "a sampled large site is not marked estimated")
            ok(0.2 * n < s["samples"] < 0.25 * n, f"{s['samples']} samples of {n} blocks, want ~22%")
            ok(0.9 * e["large_asked"] <= s["bytes"] <= 1.1 * e["large_asked"],
               f"estimated {s['bytes']} bytes, allocated {e['large_asked']}")
            ok(0.9 * n <= s["count"] <= 1.1 * n, f"estimated {s['count']} blocks, allocated {n}")
            ok(s["live_count"] == 0 and s["live_bytes"] == 0, f"freed blocks still live: {s['live_bytes']}")
    elif name == "mmap":
        # Served mappings keep their site through munmap splits and mremap;
        # every page is exact (mappings are never sampled).
        r = report(d, o["pid"])
        ok(r["counters"]["mmap_served"] >= 6, f"mappings not served: {r['counters']['mmap_served']}")
        s = site(r["profile"]["by_bytes"], "map_pages", "mmap")
        if ok(s is not None, "map_pages is not an mmap site in by_bytes"):
            ok(s["live_bytes"] == e["live_pages"] * 4096,
               f"live {s['live_bytes'] // 4096} pages, want {e['live_pages']}")
            ok(s["live_count"] == e["live_count"], f"live count {s['live_count']}, want {e['live_count']}")
            ok(s["bytes"] == e["pages"] * 4096, f"allocated {s['bytes'] // 4096} pages, want {e['pages']}")
            ok(s["count"] == e["count"], f"count {s['count']}, want {e['count']}")
            ok(not s["estimated"], "an mmap site marked estimated")
    elif name == "api":
        r = load(os.path.join(d, "api.json"))
        ok(r["when"] == "request", "api report when != request")
        ok(r["large_blocks_in_use"] == o["blocks"] == 1, f"blocks {r['large_blocks_in_use']} / {o['blocks']}")
        ok(r["large_bytes_in_use"] == o["in_use"], "vmapalloc_counter_get != the report")
        ok(o["peak"] >= 4 * MiB, f"peak {o['peak']} < the 4 MiB block")
        ok(o["peak_after_reset"] == o["in_use"], "vmapalloc_reset_peaks did not reset the peak")
        ok(o["unknown_rc"] == -1, "an unknown counter name was accepted")
        ok(r["profile"] is None, "profile present without VMAPALLOC_PROFILE")
        x = ET.parse(os.path.join(d, "api.xml")).getroot()
        names = {s.get("name"): int(s.get("value")) for s in x.iter("stat")}
        ok(names.get("large_blocks_in_use") == 1, "malloc_info: large_blocks_in_use")
        ok({"malloc_calls", "purges", "large_bytes_peak"} <= set(names), "malloc_info: missing stats")
        sysv = {s.get("name"): int(s.get("value")) for s in x.iter("system")}
        ok(sysv.get("resident_bytes", 0) > 0, "malloc_info: resident_bytes")
    elif name == "launcher":
        files = glob.glob(os.path.join(d, "l-*.json"))
        if ok(len(files) == 1, f"launcher: reports {files}"):
            r = load(files[0])
            ok(r["pid"] == o["pid"], "launcher report of another process")
            check_leak(r["profile"])
    else:
        ok(False, f"unknown scenario {name}")


def small_label():
    """The calls line's label: glibc's alone, or with slabs or mimalloc beside it."""
    b = os.environ.get("VMAPALLOC_BACKEND", "auto")
    return "small / large" if b in ("builtin", "mimalloc") else "small (glibc) / large"


def text(d, profile):
    err = open(os.path.join(d, "err.txt")).read()
    ok(err.startswith("vmapalloc 0.1.0 report at exit: pid "), f"text report does not start the stderr: {err[:80]!r}")
    for label in ("large blocks in use", "small blocks in use", "resident (VmRSS)", "AnonHugePages", "LazyFree",
                  "cached for reuse", "address space reserved", "mappings", "of vm.max_map_count", "calls",
                  small_label(), "large reuse", "purges", "program's mmap", "locks", "counters",
                  "shards (read without their locks", "pools by size"):
        ok(label in err, f"text report without '{label}'")
    ok("{" not in err, "JSON in a text report")
    if profile:
        ok("allocation sites" in err and "leaky_function+0x" in err and "(report_prog)" in err,
           "text profile without leaky_function+0x... (report_prog)")
        ok("still live (leak candidates at exit)" in err, "no live table")


def text_signal(d):
    err = open(os.path.join(d, "err.txt")).read()
    ok(err.count("report on signal: pid ") == 1, "no (or several) signal reports on stderr")
    ok(err.count("report at exit: pid ") == 1, "no (or several) exit reports on stderr")
    ok(err.index("report on signal") < err.index("report at exit"), "signal report after the exit report")
    ok("glibc's figures are not read in a signal handler" in err, "glibc figures in the signal report")


def symlink(d):
    victim = os.path.join(d, "victim")
    ok(open(victim).read() == "do not touch\n", "the file behind the symbolic link was changed")
    ok(os.path.islink(os.path.join(d, "r-fixed.json")), "the symbolic link was replaced")
    ok(os.path.islink(os.path.join(d, "r-dangling.json")) and not os.path.exists(os.path.join(d, "nowhere")),
       "a file was created through a dangling symbolic link")
    for f in ("err.txt", "err2.txt"):
        lines = [l for l in open(os.path.join(d, f)).read().splitlines() if l]
        ok(len(lines) == 1 and lines[0].startswith("vmapalloc: ") and "no report written" in lines[0],
           f"{f}: want one vmapalloc line, got {lines}")


def finish():
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    what, d = sys.argv[1], sys.argv[2]
    if what == "text":
        text(d, profile=True)
    elif what == "text_signal":
        text_signal(d)
    elif what == "symlink":
        symlink(d)
    else:
        scenario(what, d)
    sys.exit(finish())

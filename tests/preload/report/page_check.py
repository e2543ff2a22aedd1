#!/usr/bin/python3
"""page_check.py LAUNCHER REPORT_PROG OUTDIR [--self-test]

The report's page, end to end: runs report_prog (one process, then a fork)
under `vmapalloc --report=DIR`, loads the DIR/report.html it wrote in
headless Chromium after the page's script has drawn it (--dump-dom), and
checks that it fetches nothing (no external script, style, font or address)
and that what the page shows is what the JSON reports say: the summary's
figures, every timeline point (its data and where it is drawn), the top
site's bytes (data and text), the live site, every size class's count (data
and bar height), the shards, the merged view of the two processes.  Saves a
screenshot (OUTDIR/report.png).

--self-test first breaks pages on purpose (a number of the embedded data, the
page's byte formatter, a bar's height) and fails unless the check catches
every one.  Exits 1 with one line per failed check.
"""
import glob
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

TOL = 0.02  # px: the page writes coordinates with two decimals


# ---- the page's DOM, as Chromium left it ---------------------------------------

class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.kids, self.parts = tag, dict(attrs), parent, [], []

    def text(self):
        return "".join(p if isinstance(p, str) else p.text() for p in self.parts)

    def classes(self):
        return (self.attrs.get("class") or "").split()

    def walk(self):
        yield self
        for k in self.kids:
            yield from k.walk()

    def find(self, cls=None, tag=None, **attrs):
        out = []
        for n in self.walk():
            if cls and cls not in n.classes():
                continue
            if tag and n.tag != tag:
                continue
            if all(n.attrs.get(k.replace("_", "-")) == str(v) for k, v in attrs.items()):
                out.append(n)
        return out


VOID = {"meta", "link", "br", "img", "input", "hr", "area", "base", "col", "embed", "source", "track", "wbr"}


class Tree(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#root", {}, None)

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.kids.append(n)
        self.cur.parts.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.kids.append(n)
        self.cur.parts.append(n)

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.parts.append(data)


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    sys.exit("page_check: no chromium (scripts/deps installs Debian's chromium)")


def browse(page, extra):
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--user-data-dir=" + profile, "--virtual-time-budget=5000"] + extra + ["file://" + page]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    return r


def dom(page):
    r = browse(page, ["--dump-dom"])
    if "data-rendered" not in r.stdout:
        sys.exit("page_check: the page's script did not finish (rc %d): %s" % (r.returncode, r.stderr[-2000:]))
    t = Tree()
    t.feed(r.stdout)
    return t.root


# ---- what the page should show -------------------------------------------------

def fmt_bytes(v):
    """The report's byte format (core/fmt.c vmap_buf_bytes)."""
    unit = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    if v < 1024:
        return "%d B" % v
    u, scale = 0, 1
    while u < 5 and v >= scale * 1024:
        scale *= 1024
        u += 1
    dec = 100 if v < scale * 10 else 10 if v < scale * 100 else 1
    fixed = (v * dec + scale // 2) // scale
    s = str(fixed // dec)
    if dec > 1:
        s += "." + str(fixed % dec).rjust(2 if dec == 100 else 1, "0")
    return s + " " + unit[u]


def num(n, attr):
    return float(n.attrs[attr])


class Checker:
    def __init__(self):
        self.failures = []

    def ok(self, cond, what):
        if not cond:
            self.failures.append(what)
        return cond

    def eq(self, got, want, what):
        return self.ok(str(got) == str(want), "%s: page %r, JSON %r" % (what, got, want))

    def view(self, root, pids):
        v = [a for a in root.find(tag="article") if a.attrs.get("data-pids") == " ".join(map(str, pids))]
        self.ok(len(v) == 1, "one view of pids %s (%d)" % (pids, len(v)))
        return v[0] if v else None

    def summary(self, v, key, want, what):
        dd = v.find(tag="dd", data_key=key)
        if self.ok(len(dd) == 1, what + ": shown once"):
            self.eq(dd[0].attrs.get("data-value"), want, what)
            self.ok(dd[0].text().startswith(fmt_bytes(want)), "%s: text %r, want %s" % (what, dd[0].text(), fmt_bytes(want)))

    def single(self, v, d):
        """One process's view against its JSON report d."""
        self.summary(v, "resident_peak_bytes", d["resident_peak_bytes"], "peak resident")
        self.summary(v, "large_bytes_peak", d["large_bytes_peak"], "peak large bytes")
        # The timeline: every point's figures, and where its dot is.
        pts = d["timeline"]["points"]
        svg = v.find(cls="timeline", tag="svg")
        dots = v.find(cls="tl-point")
        if self.ok(svg and len(dots) == len(pts), "timeline: %d dots for %d points" % (len(dots), len(pts))):
            ymax = max(max(p[1], p[2], p[3]) for p in pts)
            self.eq(svg[0].attrs["data-ymax"], ymax, "timeline: the axis's top")
            y0, h = num(svg[0], "data-y0"), num(svg[0], "data-h")
            for i, (p, c) in enumerate(zip(pts, dots)):
                for attr, k in (("data-t-ns", 0), ("data-in-use", 1), ("data-resident", 2), ("data-cached", 3),
                                ("data-mappings", 5)):
                    self.eq(c.attrs.get(attr), p[k], "timeline point %d %s" % (i, attr))
                want = y0 - h * p[1] / ymax
                self.ok(abs(num(c, "cy") - want) <= TOL, "timeline point %d drawn at y %s, want %.2f" %
                        (i, c.attrs.get("cy"), want))
        # The top site by bytes: its figure, its text, its innermost frame.
        top = d["profile"]["by_bytes"][0]
        rows = v.find(cls="site")
        if self.ok(rows, "no site row"):
            r = rows[0]
            self.eq(r.attrs.get("data-bytes"), top["bytes"], "top site's bytes")
            text = r.find(cls="site-bytes")[0].text()
            self.eq(text, ("~" if top["estimated"] else "") + fmt_bytes(top["bytes"]), "top site's bytes shown")
            leaf = r.find(tag="summary")[0].text()
            self.ok(leaf.startswith(top["frames"][0]["function"]), "top site's frame %r, want %s" %
                    (leaf, top["frames"][0]["function"]))
        live = d["profile"]["live"]
        lrows = v.find(cls="live-site")
        if self.ok(len(lrows) == len(live) or len(lrows) >= 1, "live rows"):
            self.eq(lrows[0].attrs.get("data-bytes"), live[0]["live_bytes"], "top live site's bytes")
        # Every size class: its count, and its bar's height.
        hist = d["profile"]["size_histogram"]
        svg = [s for s in v.find(cls="hist", tag="svg") if s.attrs.get("data-key") == "count"]
        if self.ok(len(svg) == 1 and hist, "size histogram of counts"):
            top_count = max(h["count"] for h in hist)
            self.eq(svg[0].attrs["data-max"], top_count, "histogram: the axis's top")
            full = num(svg[0], "data-h")
            for h in hist:
                bar = svg[0].find(cls="hist-bar", data_kind=h["kind"], data_max_bytes=h["max_bytes"])
                if self.ok(len(bar) == 1, "histogram: a bar for %s <= %d" % (h["kind"], h["max_bytes"])):
                    self.eq(bar[0].attrs.get("data-count"), h["count"], "histogram %s <= %d count" % (h["kind"], h["max_bytes"]))
                    want = full * h["count"] / top_count
                    self.ok(abs(num(bar[0], "height") - want) <= TOL, "histogram %s <= %d: bar %s high, want %.2f" %
                            (h["kind"], h["max_bytes"], bar[0].attrs.get("height"), want))
        for s in d["shard_table"]:
            row = v.find(cls="shard", data_shard=s["shard"])
            if self.ok(len(row) == 1, "shard %d row" % s["shard"]):
                self.eq(row[0].attrs.get("data-locks"), s["lock_acquisitions"], "shard %d locks" % s["shard"])

    def merged(self, v, ds):
        self.summary(v, "resident_peak_bytes", sum(d["resident_peak_bytes"] for d in ds), "merged peak resident")
        want = {}
        for d in ds:
            for h in d["profile"]["size_histogram"]:
                k = (h["kind"], h["max_bytes"])
                want[k] = want.get(k, 0) + h["count"]
        for (kind, mb), n in want.items():
            bar = [b for s in v.find(cls="hist", tag="svg") if s.attrs.get("data-key") == "count"
                   for b in s.find(cls="hist-bar", data_kind=kind, data_max_bytes=mb)]
            if self.ok(len(bar) == 1, "merged histogram bar %s <= %d" % (kind, mb)):
                self.eq(bar[0].attrs.get("data-count"), n, "merged histogram %s <= %d count" % (kind, mb))


SVG_NS = "http://www.w3.org/2000/svg"


def self_contained(c, page):
    """Nothing the page would fetch: no script, style, image or font from a
    file or the network."""
    with open(page) as f:
        text = f.read()
    for what, pat in (("an external script", r"<script[^>]*\bsrc="), ("a linked file", r"<link\b"),
                      ("an image", r"<img\b"), ("a CSS import or url()", r"@import|url\("),
                      ("an address", r"https?://")):
        found = [m for m in re.findall(pat, text.replace(SVG_NS, "")) if m]
        c.ok(not found, "the page has %s: %s" % (what, found[:3]))


def check_page(page, runs):
    """runs: [(pids of the run, {pid: JSON report})]; the failures."""
    root = dom(page)
    c = Checker()
    self_contained(c, page)
    for pids, reports in runs:
        for pid in pids:
            v = c.view(root, [pid])
            if v:
                c.single(v, reports[pid])
        if len(pids) > 1:
            v = c.view(root, sorted(pids, key=lambda p: reports[p]["timeline"]["start_ns"]))
            if v:
                c.merged(v, list(reports.values()))
    return c.failures


# ---- breaking pages on purpose ----------------------------------------------------

DATA = re.compile(r'(<script id="data" type="application/json">)(.*?)(</script>)', re.S)


def with_data(text, change):
    m = DATA.search(text)
    data = json.loads(m.group(2))
    change(data)
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return text[:m.start(2)] + blob + text[m.end(2):]


def breakages():
    def site(d):
        d["views"][-1]["sites"][0]["bytes"] += 4096

    def point(d):
        d["views"][-1]["timeline"]["points"][0][1] += 1  # not the highest: the axis stays

    def size_class(d):
        d["views"][-1]["histogram"][0]["count"] += 1

    def script(old, new):
        def f(text):
            if old not in text:
                sys.exit("page_check: self-test: %r is not in the page any more" % old)
            return text.replace(old, new, 1)
        return f

    return [
        ("top site's bytes (data)", lambda t: with_data(t, site)),
        ("timeline point (data)", lambda t: with_data(t, point)),
        ("size class count (data)", lambda t: with_data(t, size_class)),
        ("byte format (script)", script("const dec = v < scale * 10 ? 100", "const dec = v < scale * 10 ? 10")),
        ("timeline scale (script)", script("y = b => T + (H - T - B) * (1 - b / ymax)",
                                        "y = b => T + (H - T - B) * (1 - b / ymax / 1.01)")),
        ("histogram bar height (script)", script("const hh = (Hh - B - T) * h[key] / max;",
                                               "const hh = (Hh - B - T) * h[key] / max * 0.98;")),
        ("self-containment (a font from the network)",
         script("<style>", "<style>@import url(https://fonts.example.org/font.css);")),
    ]


# ---- the runs --------------------------------------------------------------------------

def run(launcher, prog, mode, d):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(VMAPALLOC_PROFILE_LARGE_SAMPLE="0", VMAPALLOC_TIMELINE_MS="1")
    r = subprocess.run(["sh", launcher, "--library=" + os.environ["VMTEST_LIB"], "--report=" + d, "--", prog, mode],
                       capture_output=True, text=True, env=env, timeout=300)
    if r.returncode:
        sys.exit("page_check: %s %s exited %d: %s" % (prog, mode, r.returncode, r.stderr[-2000:]))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    reports = {}
    for p in glob.glob(os.path.join(d, "run*.json")):
        with open(p) as f:
            j = json.load(f)
        reports[j["pid"]] = j
    pids = [out["pid"]] + ([out["child"]] if out.get("child") else [])
    if sorted(reports) != sorted(pids):
        sys.exit("page_check: reports of pids %s, the program says %s" % (sorted(reports), pids))
    # The parent's timeline has points of its own and the last one; a forked
    # child's starts at the fork, and may have the last one only.
    for pid in pids:
        t = reports[pid].get("timeline")
        least = 2 if pid == out["pid"] else 1
        if not (t and len(t["points"]) >= least and reports[pid].get("profile")):
            sys.exit("page_check: pid %d: no timeline of %d points or no profile in its report" % (pid, least))
    return pids, reports


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    launcher, prog, outdir = args
    self_test = "--self-test" in sys.argv
    outdir = os.path.abspath(outdir)
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    failures = []
    for mode in ("basic", "fork"):
        d = os.path.join(outdir, mode)
        pids, reports = run(launcher, prog, mode, d)
        page = os.path.join(d, "report.html")
        if not os.path.isfile(page):
            sys.exit("page_check: the launcher wrote no %s" % page)
        if self_test and mode == "basic":
            with open(page) as f:
                good = f.read()
            for what, brk in breakages():
                bad = os.path.join(d, "broken.html")
                with open(bad, "w") as f:
                    f.write(brk(good))
                found = check_page(bad, [(pids, reports)])
                if not found:
                    failures.append("self-test: a page with a broken %s passed the check" % what)
                else:
                    print("self-test: broken %s caught: %s" % (what, found[0]))
        found = check_page(page, [(pids, reports)])
        failures += ["%s: %s" % (mode, f) for f in found]
        print("%s: %d pid(s), %d timeline points, page checked" %
              (mode, len(pids), sum(len(reports[p]["timeline"]["points"]) for p in pids)))
        if mode == "basic":
            shot = os.path.join(outdir, "report.png")
            browse(page, ["--screenshot=" + shot, "--window-size=1000,2600", "--hide-scrollbars"])
            with open(shot, "rb") as f:
                head = f.read(8)
            if head != b"\x89PNG\r\n\x1a\n" or os.path.getsize(shot) < 20000:
                failures.append("no screenshot in %s" % shot)
            else:
                print("screenshot: %s (%d bytes)" % (shot, os.path.getsize(shot)))
    # The launcher returns the program's status, report or not.
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run(["sh", launcher, "--library=" + os.environ["VMTEST_LIB"],
                        "--report=" + os.path.join(outdir, "status"), "--", "sh", "-c", "exit 7"],
                       capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 7:
        failures.append("the launcher returned %d for a program that exited 7" % r.returncode)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

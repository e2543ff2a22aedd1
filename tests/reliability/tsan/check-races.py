#!/usr/bin/env python3
"""check-races.py KNOWN LOG... — classifies ThreadSanitizer reports.

Each report in the logs (TSAN_OPTIONS=log_path=...) is reduced to its kind
and the top frames of its two memory accesses, e.g.
    data race | collect | vmap_pool_push_locked
(the two function names sorted).  KNOWN lists the pairs already analysed
(one per line, same form, '#' comments).  Prints every distinct pair with
its count, marked "known" or "NEW"; exits 1 if there is a NEW one.
"""
import re
import sys


def pairs_of(text):
    for rep in text.split("WARNING: ThreadSanitizer:")[1:]:
        kind = rep.split("(")[0].strip()
        tops = []
        for block in re.split(r"\n  (?=\S)", rep):
            first = block.strip().split("\n")[0]
            if not re.match(r"(previous )?(atomic )?(read|write)", first, re.I):
                continue
            m = re.search(r"\n\s+#0 (\S+)", block)
            if m:
                tops.append(m.group(1))
        if kind != "data race" or not tops:
            # lock-order inversions, thread leaks...: keyed by the first frame
            m = re.search(r"\n\s+#0 (\S+)", rep)
            tops = [m.group(1) if m else "?"]
        yield " | ".join([kind] + sorted(tops[:2]))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    known = set()
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                known.add(" | ".join(p.strip() for p in line.split("|")))
    counts = {}
    for path in sys.argv[2:]:
        with open(path, errors="replace") as f:
            for key in pairs_of(f.read()):
                counts[key] = counts.get(key, 0) + 1
    new = 0
    for key in sorted(counts):
        mark = "known" if key in known else "NEW"
        new += mark == "NEW"
        print("  %-5s %4d  %s" % (mark, counts[key], key))
    print("tsan: %d distinct report(s), %d known, %d new"
          % (len(counts), len(counts) - new, new))
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())

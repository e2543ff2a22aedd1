#!/usr/bin/python3
"""start_pages.py — what a short process runs of the library lies in its first 64 KiB.

A process maps the library's executable segment a 64 KiB window at a time
(the kernel's fault-around): every window it touches is resident in it.  A
short process runs the constructor, its first calls' set-up and the exit
(core/section.h: VMAP_START_TEXT, VMAP_START_DATA), which the linker puts in
the file's first window.  This runs `sh -c` (dash allocates: the set-up runs)
under valgrind's lackey, which traces every instruction fetch, load and
store, and fails if one of them falls in the library past its first 64 KiB,
naming the function or object there.  The shell writes its own maps line of
the library, so that the addresses are its.

Environment: VMTEST_LIB, the library; the VMAPALLOC_* variables are dropped
(the defaults are what is checked).  Exits 1 with one line per stray access.
"""
import os
import subprocess
import sys
import tempfile

WINDOW = 64 << 10


def symbols(lib):
    """(start, size, name) of every defined symbol, from nm."""
    out = subprocess.run(["nm", "-S", "--defined-only", lib], capture_output=True,
                         text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4:
            syms.append((int(f[0], 16), int(f[1], 16), f[3]))
    return syms


def name_at(syms, off):
    for start, size, name in syms:
        if start <= off < start + max(size, 1):
            return name
    return "?"


def main():
    lib = os.path.realpath(os.environ["VMTEST_LIB"])
    with tempfile.TemporaryDirectory() as tmp:
        log, maps = os.path.join(tmp, "lackey.log"), os.path.join(tmp, "maps")
        # the defaults: a short process under BACKEND=builtin sets the slabs up
        env = {k: v for k, v in os.environ.items() if not k.startswith("VMAPALLOC_")}
        env["LD_PRELOAD"] = lib
        script = 'grep -F "%s" /proc/$$/maps > "%s"' % (lib, maps)
        r = subprocess.run(["valgrind", "--tool=lackey", "--trace-mem=yes",
                            "--log-file=" + log, "sh", "-c", script], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print("start_pages: valgrind sh -c failed (%d): %s" % (r.returncode, r.stderr.strip()[-300:]))
            return 1
        base = end = None
        for line in open(maps):
            f = line.split()
            if f[1].startswith("r-x") and int(f[2], 16) == 0:
                base, end = (int(x, 16) for x in f[0].split("-"))
        if base is None:
            print("start_pages: no executable mapping of %s in the shell's maps" % lib)
            return 1
        touched, stray = 0, {}
        with open(log) as f:
            for line in f:
                p = line.split()
                if len(p) != 2 or p[0] not in ("I", "L", "S", "M"):
                    continue
                a = int(p[1].split(",")[0], 16)
                if base <= a < end:
                    touched += 1
                    if a - base >= WINDOW:
                        stray.setdefault(a - base, p[0])
    if touched == 0:
        print("start_pages: the trace has no access to the library: the preload did not take effect")
        return 1
    if stray:
        syms = symbols(lib)
        names = {}
        for off, kind in sorted(stray.items()):
            names.setdefault(name_at(syms, off), (off, kind))
        for name, (off, kind) in sorted(names.items(), key=lambda x: x[1]):
            print("start_pages: sh -c touches %s at file offset %#x (%s), past the first 64 KiB"
                  % (name, off, {"I": "code", "L": "load", "S": "store", "M": "modify"}[kind]))
        return 1
    print("start_pages: %d accesses to the library, all in its first 64 KiB" % touched)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Check a test app's printed ground truth against an independent tool.

usage: validate.py valgrind APP [ARGS...]   heap: Memcheck's leak records, summed per site
       validate.py strace APP [ARGS...]     commits: mmap/munmap with strace -k stacks

The app runs under the tool with its go-signals fed on stdin (app-sync.h). For valgrind,
every block the app says is live at the end must be in a leak record (definitely lost or
still reachable) whose first site frame is that site, with the same count and bytes, and no
transient site may appear. For strace (memorytestapp only), every 10 MiB mmap/munmap is
attributed to the first app function on its stack and the totals compared with the
"commits" of the ground truth. Exit 0: agree, 1: disagree, 77: the tool is missing.
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(cmd, log):
    # Enough go-bytes for every pause of every app (memorytestapp waits five times).
    p = subprocess.run(cmd, input=b"gggggggg", stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if p.returncode != 0:
        sys.exit("FAIL: %s exited %d: %s" % (cmd, p.returncode, p.stderr.decode()[-2000:]))
    truth = None
    for line in p.stdout.decode().splitlines():
        d = json.loads(line)
        if d.get("done"):
            truth = d
    if truth is None:
        sys.exit("FAIL: no ground truth line from %s" % cmd)
    return truth


def heap_sites(truth):
    if "sites" in truth:  # mtalloc
        return truth["sites"]
    return truth["heap"]  # memorytestapp


def check_valgrind(app, args):
    if not shutil.which("valgrind"):
        print("SKIP: valgrind missing")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "vg.txt")
        extra = []
        for lib in ("jemalloc", "tcmalloc"):
            if lib in os.path.basename(app):
                extra.append("--soname-synonyms=somalloc=*%s*" % lib)
        cmd = ["valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=all",
               "--log-file=" + log] + extra + [app] + args
        truth = run(cmd, log)
        text = open(log).read()
    sites = heap_sites(truth)
    names = {s["site"] for s in sites}
    got = collections.defaultdict(lambda: [0, 0])
    for rec in re.split(r"\n==\d+== \n", text):
        m = re.search(r"([\d,]+) (?:\(.*?\) )?bytes in ([\d,]+) blocks are "
                      r"(?:definitely lost|indirectly lost|possibly lost|still reachable)", rec)
        if not m:
            continue
        for fn in re.findall(r"(?:at|by) 0x[0-9A-F]+: (\w+)", rec):
            if fn in names:
                got[fn][0] += int(m.group(2).replace(",", ""))
                got[fn][1] += int(m.group(1).replace(",", ""))
                break
    bad = 0
    for s in sites:
        want = [s["live_count"], s["live_bytes"]]
        have = got.get(s["site"], [0, 0])
        ok = want == have
        bad += not ok
        print("%-22s live: app %6d blocks %8d bytes   valgrind %6d blocks %8d bytes  %s"
              % (s["site"], want[0], want[1], have[0], have[1], "ok" if ok else "DIFFERENT"))
    return bad


def check_strace(app, args):
    if not shutil.which("strace"):
        print("SKIP: strace missing")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "st.txt")
        truth = run(["strace", "-f", "-k", "-e", "trace=mmap,munmap", "-o", log, app] + args, log)
        lines = open(log).read().splitlines()
    sites = {c["site"] for c in truth["commits"]}
    size = 10 << 20
    maps = collections.Counter()
    unmaps = collections.Counter()
    i = 0
    while i < len(lines):
        m = re.match(r"\d+ +(mmap|munmap)\((.*)", lines[i])
        i += 1
        frames = []
        while i < len(lines) and lines[i].startswith(" > "):
            frames.append(lines[i])
            i += 1
        if not m or (", %d" % size) not in m.group(2):
            continue
        site = next((f for fr in frames for f in re.findall(r"\((\w+)\+0x", fr) if f in sites), None)
        (maps if m.group(1) == "mmap" else unmaps)[site] += 1
    bad = 0
    for c in truth["commits"]:
        want = (c["count"], c["count"] - c["live_count"])
        have = (maps[c["site"]], unmaps[c["site"]])
        ok = want == have and c["bytes"] == c["count"] * size
        bad += not ok
        print("%-26s commits/releases: app %d/%d  strace %d/%d  %s"
              % (c["site"], want[0], want[1], have[0], have[1], "ok" if ok else "DIFFERENT"))
    if None in maps or None in unmaps:
        print("10 MiB maps outside any site: %d, unmaps %d" % (maps[None], unmaps[None]))
        bad += 1
    return bad


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("valgrind", "strace"):
        sys.exit(__doc__)
    check = check_valgrind if sys.argv[1] == "valgrind" else check_strace
    bad = check(sys.argv[2], sys.argv[3:])
    print("FAIL: %d sites differ" % bad if bad else "ground truth confirmed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Fails when files of the daemon depend on each other in a circle.

The graph has one node per .c and .h file of daemon/ and an edge A -> B when
  - A includes "B" (#include "..." resolved to a file of daemon/): an
    include cycle is a set of headers that include each other, or
  - A's object file uses a symbol that B's object file defines (nm: A's
    undefined symbols resolved to the object that defines them), for the
    daemon's objects in the build directory given as argument: a call cycle
    is a set of .c files that call (or read) each other in a circle.
A header is not the .c of the same name: including a module's header to
use its types and declarations is a dependency on the header only, and the
calls into the module are the call edges. Every strongly connected
component of more than one file is a cycle: it is printed with the edges
that make it, and the script exits 1 unless the component is listed in
scripts/check-cycles.allow (one component a line: its files separated by
spaces, then "#" and the reason).

usage: scripts/check-cycles.py BUILD_DIR [--graph]
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAEMON = "daemon"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def source_files():
    """Every .c and .h under daemon/, as paths relative to the repository."""
    out = []
    for d, _, names in os.walk(os.path.join(ROOT, DAEMON)):
        for n in names:
            if n.endswith((".c", ".h")) and not n.endswith(".bpf.c"):
                out.append(os.path.relpath(os.path.join(d, n), ROOT))
    return sorted(out)


def node_of(path):
    """Every file is a node of its own (a header is not its .c)."""
    return path


def include_edges(files):
    """(A, B, '#include "b.h"') for each include of a daemon file by another one."""
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    edges = []
    for f in files:
        with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for inc in INCLUDE_RE.findall(text):
            # Relative to the including file first, then by name (the build's
            # include directories are folders of daemon/).
            rel = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            if rel in files:
                targets = [rel]
            else:
                targets = by_name.get(os.path.basename(inc), [])
            for t in targets:
                a, b = node_of(f), node_of(t)
                if a != b:
                    edges.append((a, b, '#include "%s"' % inc))
    return sorted(set(edges))


def daemon_objects(build):
    """{source path: object path} for the objects CMake built from daemon/ sources."""
    objs = {}
    for d, _, names in os.walk(build):
        for n in names:
            if not n.endswith((".c.o", ".c.obj")):
                continue
            p = os.path.join(d, n)
            m = re.match(r"(.*)/CMakeFiles/[^/]+\.dir/(.*)\.(o|obj)$", os.path.relpath(p, build))
            if not m:
                continue
            src = os.path.normpath(os.path.join(m.group(1), m.group(2)))
            if src.startswith(DAEMON + "/") and os.path.exists(os.path.join(ROOT, src)):
                objs[src] = p
    return objs


def nm_symbols(obj):
    """(defined, undefined) external symbol names of an object file."""
    res = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True)
    defined, undefined = set(), set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper():  # global: T, D, B, R, C, W, V ...
            defined.add(name)
    return defined, undefined


def symbol_edges(build):
    objs = daemon_objects(build)
    syms = {src: nm_symbols(o) for src, o in objs.items()}
    owner = {}
    for src, (defined, _) in syms.items():
        for s in defined:
            owner.setdefault(s, src)
    edges = []
    for src, (_, undefined) in syms.items():
        for s in sorted(undefined):
            t = owner.get(s)
            if t and t != src:
                edges.append((node_of(src), node_of(t), s))
    return edges, len(objs)


def sccs(nodes, adj):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(adj.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def read_allow():
    path = os.path.join(ROOT, "scripts", "check-cycles.allow")
    allowed = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                files = line.split("#", 1)[0].split()
                if files:
                    allowed.append(set(files))
    return allowed


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__.strip().splitlines()[-1])
    build = args[0]
    files = source_files()
    edges = include_edges(files)
    sedges, nobj = symbol_edges(build)
    if nobj == 0:
        sys.exit("check-cycles: no daemon object under %s (build it first)" % build)
    edges += sedges
    adj, why = {}, {}
    for a, b, w in edges:
        adj.setdefault(a, set()).add(b)
        why.setdefault((a, b), []).append(w)
    nodes = sorted({node_of(f) for f in files})
    if "--graph" in sys.argv:
        for a in nodes:
            for b in sorted(adj.get(a, ())):
                print("%s -> %s: %s" % (a, b, ", ".join(why[(a, b)][:4])))
    allowed = read_allow()
    bad = 0
    comps = [c for c in sccs(nodes, adj) if len(c) > 1]
    for comp in comps:
        ok = any(set(comp) <= a for a in allowed)
        bad += not ok
        print("%s cycle of %d files:" % ("allowed" if ok else "FAIL:", len(comp)))
        members = set(comp)
        for a in comp:
            for b in sorted(adj.get(a, ()) & members):
                ws = why[(a, b)]
                more = " (+%d)" % (len(ws) - 3) if len(ws) > 3 else ""
                print("  %s -> %s: %s%s" % (a, b, ", ".join(ws[:3]), more))
    print("check-cycles: %d files, %d objects, %d edges, %d cycles (%d not allowed)"
          % (len(nodes), nobj, sum(len(v) for v in adj.values()), len(comps), bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Size limits of the product's C files (daemon/ agent/ common/ ctl/).

A file over MAX_FILE_LINES lines, or a function over MAX_FUNC_LINES lines
whose head comment (the /* */ right above it) has no line with "Long:"
giving the reason, is an offender. Offenders named in scripts/check-size.allow
(a path, or path:function, one per line; # starts a comment) are listed but
pass. Exit 1 if any other offender is found.

A function is counted from the first line of its signature to its closing
brace: the house style (.clang-format, BreakBeforeBraces: Linux) puts a
function's braces alone at column 0, and nothing else's.

--table prints the largest files and the longest functions instead;
--root DIR measures another checkout (e.g. a git archive of main), with
its own allow list; --self-test checks this script on made-up files.
"""
import os
import re
import subprocess
import sys
import tempfile

MAX_FILE_LINES = 800
MAX_FUNC_LINES = 80
DIRS = ("daemon", "agent", "common", "ctl")
EXTS = (".c", ".h", ".def")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def product_files():
    for d in DIRS:
        for dirpath, dirnames, names in os.walk(os.path.join(ROOT, d)):
            dirnames.sort()
            for n in sorted(names):
                if n.endswith(EXTS):
                    path = os.path.join(dirpath, n)
                    yield os.path.relpath(path, ROOT).replace(os.sep, "/")


def read_lines(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def signature_start(lines, brace):
    """Index of the first line of the signature that ends at the line before brace."""
    i = brace - 1
    while i > 0:
        prev = lines[i - 1]
        if not prev.strip() or prev.startswith(("#", "}")) or prev.rstrip().endswith((";", "*/")):
            break
        i -= 1
    return i


def head_comment(lines, start):
    """The lines of the /* */ comment ending right above line start, if any."""
    end = start - 1
    if end < 0 or not lines[end].rstrip().endswith("*/"):
        return []
    i = end
    while i >= 0 and "/*" not in lines[i]:
        i -= 1
    return lines[max(i, 0) : end + 1]


def functions(path, lines):
    """(name, first line number, length, has_long_reason) of each function."""
    out = []
    for b, line in enumerate(lines):
        if line.rstrip() != "{":
            continue
        end = next((k for k in range(b + 1, len(lines)) if lines[k].startswith("}")), None)
        if end is None:
            continue
        start = signature_start(lines, b)
        sig = " ".join(lines[start:b])
        m = re.search(r"(\w+)\s*\(", sig)
        if not m:
            continue
        reason = any("Long:" in c for c in head_comment(lines, start))
        out.append((m.group(1), start + 1, end - start + 1, reason))
    return out


def load_allow():
    allow = set()
    path = os.path.join(ROOT, "scripts", "check-size.allow")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    allow.add(line)
    return allow


def measure():
    files, funcs = [], []
    for path in product_files():
        lines = read_lines(path)
        n = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
        files.append((n, path))
        if path.endswith((".c", ".h")):
            for name, first, length, reason in functions(path, lines):
                funcs.append((length, path, name, first, reason))
    return files, funcs


def table(files, funcs):
    print("largest files (lines):")
    for n, path in sorted(files, key=lambda x: (-x[0], x[1]))[:10]:
        print("  %5d  %s" % (n, path))
    print("longest functions (lines, signature to closing brace):")
    for length, path, name, first, _ in sorted(funcs, key=lambda x: (-x[0], x[1], x[3]))[:15]:
        print("  %5d  %s:%d %s" % (length, path, first, name))
    print("files over %d lines: %d; functions over %d lines: %d (%d with a Long: reason)" % (
        MAX_FILE_LINES, sum(1 for n, _ in files if n > MAX_FILE_LINES), MAX_FUNC_LINES,
        sum(1 for f in funcs if f[0] > MAX_FUNC_LINES),
        sum(1 for f in funcs if f[0] > MAX_FUNC_LINES and f[4])))


def check(files, funcs):
    allow = load_allow()
    used, bad, allowed = set(), [], []
    for n, path in files:
        if n > MAX_FILE_LINES:
            (allowed if path in allow else bad).append("%s: %d lines (max %d)" % (path, n, MAX_FILE_LINES))
            used.add(path)
    for length, path, name, first, reason in funcs:
        if length <= MAX_FUNC_LINES or reason:
            continue
        key = "%s:%s" % (path, name)
        msg = "%s:%d: %s is %d lines (max %d; or say why in a \"Long:\" line of its head comment)" % (
            path, first, name, length, MAX_FUNC_LINES)
        (allowed if key in allow else bad).append(msg)
        used.add(key)
    for msg in allowed:
        print("allowed: " + msg)
    for key in sorted(allow - used):
        print("check-size.allow: %s is within the limits now: remove it" % key)
    for msg in bad:
        print("too long: " + msg)
    if bad:
        print("check-size: %d offender(s) not in scripts/check-size.allow" % len(bad))
        return 1
    print("check-size: ok (%d allowed by scripts/check-size.allow)" % len(allowed))
    return 0


def c_function(name, body_lines, comment):
    head = "/* %s */\n" % comment if comment else ""
    return head + "static int %s(int x)\n{\n" % name + "    x++;\n" * body_lines + "    return x;\n}\n"


def self_test():
    """The checker on a made-up tree: each limit caught, each way out honoured."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "daemon"))
        os.makedirs(os.path.join(root, "scripts"))
        os.makedirs(os.path.join(root, "tests"))

        def write(path, text):
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)

        def run():
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", root],
                               stdout=subprocess.PIPE, universal_newlines=True)
            return p.returncode, p.stdout

        # 77 body lines + signature, braces and return: 81 lines; 76: 80 lines.
        write("daemon/a.c", c_function("long_fn", 77, "no reason") + "\n" +
              c_function("ok_fn", 76, "") + "\n" +
              c_function("said_fn", 90, "Long: one table of cases, read top to bottom"))
        write("daemon/big.h", "/* big */\n" + "int x;\n" * 800)
        write("tests/t.c", "/* tests are not product */\n" + "int y;\n" * 900)
        rc, out = run()
        ok = (rc == 1 and "daemon/a.c:2: long_fn is 81 lines" in out and "ok_fn" not in out
              and "said_fn" not in out and "daemon/big.h: 801 lines" in out
              and "tests/t.c" not in out)
        write("scripts/check-size.allow", "# c\ndaemon/a.c:long_fn\ndaemon/big.h\ndaemon/gone.c\n")
        rc2, out2 = run()
        ok = ok and rc2 == 0 and "daemon/gone.c is within the limits now" in out2
        if not ok:
            print("check-size self-test failed:\n--- without allow list (rc %d)\n%s"
                  "--- with allow list (rc %d)\n%s" % (rc, out, rc2, out2))
            return 1
        print("check-size self-test: ok")
        return 0


def main():
    global ROOT
    args = sys.argv[1:]
    if "--root" in args:
        ROOT = os.path.abspath(args[args.index("--root") + 1])
    files, funcs = measure()
    if "--self-test" in args:
        return self_test()
    if "--table" in args:
        table(files, funcs)
        return 0
    return check(files, funcs)


if __name__ == "__main__":
    sys.exit(main())

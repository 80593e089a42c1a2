#!/usr/bin/env python3
"""An independent model of `heaptracectl load FILE.etl` for tests/integration/cases-adv25.sh.

gen OUT.etl MODEL.json SEED [--xpress] [--events N]: a Windows .etl of random heap
allocations, frees, in-place and moving reallocs (a moving ReAlloc logged with its own Alloc
and Free, as Windows does), VirtualAlloc commits and releases (some logged by another
process's thread: the owner is the payload's) over several processes (one of them 32-bit
records, two with the same image name) and processors, timestamps interleaved; and what
each session must answer, computed here from the events generated, not from the reader:
the live blocks and bytes, the commits, per window the four lifetime types, the timeline.
reuse OUT.etl, names OUT.etl: the small files of cases-adv25.sh (see each).
check MODEL.json: loads nothing; queries the sessions already loaded (HT_CTL) and compares.

Layouts: WMI_BUFFER_HEADER, SYSTEM/PERFINFO record headers, TRACE_LOGFILE_HEADER as
tests/fuzz/make-etl-seeds.py; ntwmi.h's packed ETW_HEAP_EVENT_* payloads; PerfView's
StackWalkStackTraceData, ProcessTraceData (version 2) and VirtualAllocTraceData."""
import json
import os
import random
import struct
import subprocess
import sys

S = 10000000  # ticks per second: the header's PerfFreq
T0 = 1000     # the header record's time: trace time 0
BUF = 8192
NCPU = 3
HEAP = 0x10000
COMMIT, RELEASE = 0x1000, 0x8000


def hdr_system(hook, tid, pid, ts, payload, p32):
    return struct.pack("<HBBHHIIQII", 2, 1 if p32 else 2, 0xC0, 0x20 + len(payload), hook, tid,
                       pid, ts, 0, 0) + payload


def hdr_perfinfo(hook, ts, payload, p32):
    return struct.pack("<HBBHHQ", 2, 0x10 if p32 else 0x11, 0xC0, 0x10 + len(payload), hook,
                       ts) + payload


def logfile():
    h = bytearray(300)
    struct.pack_into("<I4BII", h, 0, BUF, 10, 0, 1, 5, 19041, NCPU)
    struct.pack_into("<II", h, 44, 8, 0)
    struct.pack_into("<QQII", h, 256, S, 132000000000000000, 1, 0)
    return hdr_system(0, 0, 0, T0, bytes(h), False)


def pad(r):
    return r + b"\xff" * (-len(r) % 8)


def xpress(data):
    """[MS-XCA] plain LZ77, literals only."""
    out = bytearray()
    for i in range(0, len(data), 32):
        out += b"\0\0\0\0" + data[i:i + 32]
    return bytes(out)


class Writer:
    def __init__(self, compress):
        self.out, self.compress, self.seq = bytearray(), compress, 0
        self.body = [bytearray() for _ in range(NCPU)]

    def buffer(self, cpu, body, btype=0):
        self.seq += 1
        end = 0x48 + len(body)
        hdr = bytearray(0x48)
        flags, data = 0, bytes(body)
        if self.compress and btype != 4:
            data, flags = xpress(data), 0x40
        size = 0x48 + len(data) if flags else BUF
        struct.pack_into("<II", hdr, 0, size, end)
        struct.pack_into("<Q", hdr, 0x18, self.seq)
        hdr[0x28] = cpu
        struct.pack_into("<I", hdr, 0x2C, 3 if self.compress else 0)
        struct.pack_into("<IHH", hdr, 0x30, end, flags, btype)
        out = bytes(hdr) + data
        self.out += out if flags else out.ljust(BUF, b"\xff")

    def add(self, cpu, recs):
        rec = b"".join(pad(r) for r in recs)
        if 0x48 + len(self.body[cpu]) + len(rec) > BUF:
            self.buffer(cpu, self.body[cpu])
            self.body[cpu] = bytearray()
        self.body[cpu] += rec

    def close(self):
        for cpu in range(NCPU):
            if self.body[cpu]:
                self.buffer(cpu, self.body[cpu])
        # BuffersWritten (TRACE_LOGFILE_HEADER +36, after the buffer and record headers).
        struct.pack_into("<I", self.out, 0x48 + 0x20 + 36, self.seq)


class Proc:
    def __init__(self, pid, name, p32):
        self.pid, self.name, self.p32 = pid, name, p32
        self.tids = [pid * 4 + i for i in range(1, 3)]
        self.live = {}     # addr -> size
        self.blocks = []   # [alloc_ns, free_ns or None, size at the end]
        self.open = {}     # addr -> index in blocks
        self.sizes = []    # (ns, delta bytes, delta count) for the timeline
        self.commits = []  # (ns, delta committed)
        self.regions = {}
        self.next_addr = 0x20000 if p32 else 0x100000000
        self.next_region = 0x1000000


def ptr(p32):
    return "I" if p32 else "Q"


def rec_alloc(p, tid, ts, addr, size):
    q = ptr(p.p32)
    frames = [0x7FF000001000 & (0xFFFFFFFF if p.p32 else ~0), 0x401000 + (size % 7) * 16]
    stack = struct.pack("<QII", ts, p.pid, tid) + struct.pack("<%d%s" % (len(frames), q), *frames)
    return [hdr_system(0x1021, tid, p.pid, ts, struct.pack("<3%sI" % q, HEAP, size, addr, 3),
                       p.p32), hdr_perfinfo(0x1820, ts, stack, p.p32)]


def rec_free(p, tid, ts, addr):
    return [hdr_system(0x1024, tid, p.pid, ts, struct.pack("<2%sI" % ptr(p.p32), HEAP, addr, 3),
                       p.p32)]


def rec_realloc(p, tid, ts, new, old, nsize, osize):
    return [hdr_system(0x1022, tid, p.pid, ts,
                       struct.pack("<5%sI" % ptr(p.p32), HEAP, new, old, nsize, osize, 3),
                       p.p32)]


def rec_virtual(p, logger, tid, ts, hook, base, size, flags):
    return [hdr_system(hook, tid, logger, ts,
                       struct.pack("<2%sII" % ptr(p.p32), base, size, p.pid, flags), p.p32)]


def rec_process(pid, ts, name, end=False):
    return [hdr_system(0x0302 if end else 0x0301, 1, pid, ts,
                       struct.pack("<QIIIII", 0xFFFF0000 + pid, pid, 4, 1, 0, 0) + name.encode() +
                       b"\0" + "x\0".encode("utf-16-le"), False)]


def ns_of(ts):
    return (ts - T0) * 100


class Gen:
    def __init__(self, seed, nev, compress):
        self.rnd = random.Random(seed)
        self.w = Writer(compress)
        self.ts = T0 + 1
        r = self.rnd
        names = ["app.exe", "app.exe", "svc host.exe", "w32.exe"]
        pids = r.sample(range(100, 5000), len(names))
        self.procs = [Proc(pid, n, n == "w32.exe") for pid, n in zip(pids, names)]
        self.nev = nev

    def tick(self):
        self.ts += self.rnd.randrange(1, 400)
        if self.ts % 10000 == 0:  # never on a millisecond: the windows' bounds are in ms
            self.ts += 1
        return self.ts

    def emit(self, recs):
        self.w.add(self.rnd.randrange(NCPU), recs)

    def alloc(self, p, tid, ts, size):
        addr = p.next_addr
        p.next_addr += 16 * ((size + 31) // 16)
        p.live[addr] = size
        p.open[addr] = len(p.blocks)
        p.blocks.append([ns_of(ts), None, size])
        p.sizes.append((ns_of(ts), size, 1))
        return addr

    def free(self, p, ts, addr):
        size = p.live.pop(addr)
        p.blocks[p.open.pop(addr)][1] = ns_of(ts)
        p.sizes.append((ns_of(ts), -size, -1))

    def step(self, p):
        r, ts = self.rnd, self.tick()
        tid = r.choice(p.tids)
        x = r.random()
        if x < 0.45 or not p.live:
            size = r.randrange(1, 4000)
            addr = self.alloc(p, tid, ts, size)
            self.emit(rec_alloc(p, tid, ts, addr, size))
        elif x < 0.75:
            addr = r.choice(list(p.live))
            self.free(p, ts, addr)
            self.emit(rec_free(p, tid, ts, addr))
        elif x < 0.83:
            # In place: the block keeps its alloc time and takes the new size.
            addr = r.choice(list(p.live))
            old, new = p.live[addr], r.randrange(1, 4000)
            p.live[addr] = new
            p.blocks[p.open[addr]][2] = new
            p.sizes.append((ns_of(ts), new - old, 0))
            recs = rec_realloc(p, tid, ts, addr, addr, new, old)
            recs.append(rec_alloc(p, tid, ts, addr, new)[1])  # its stack
            self.emit(recs)
        elif x < 0.9:
            # Moving: ReAlloc, then the Alloc of the new block and the Free of the old one.
            old_addr = r.choice(list(p.live))
            old, new = p.live[old_addr], r.randrange(1, 4000)
            addr = self.alloc(p, tid, ts, new)
            self.free(p, ts, old_addr)
            recs = rec_realloc(p, tid, ts, addr, old_addr, new, old)
            recs += rec_alloc(p, tid, ts, addr, new) + rec_free(p, tid, ts, old_addr)
            self.emit(recs)
        else:
            self.virtual(p, ts)

    def virtual(self, p, ts):
        r = self.rnd
        # A third of them logged by another process's thread (VirtualAllocEx).
        other = r.choice(self.procs)
        logger, tid = (other.pid, other.tids[0]) if r.random() < 0.33 else (p.pid, p.tids[0])
        if p.regions and r.random() < 0.4:
            base = r.choice(list(p.regions))
            size = p.regions.pop(base)
            p.commits.append((ns_of(ts), -size))
            # The kernel logs the region's size (a Windows-written 32-bit VirtualFree: RegionSize
            # 0x40000 with MEM_RELEASE, libtrace's test vectors).
            self.emit(rec_virtual(p, logger, tid, ts, 0x0263, base, size, RELEASE))
            return
        base, size = p.next_region, 4096 * r.randrange(1, 64)
        p.next_region += size + 0x10000
        p.regions[base] = size
        p.commits.append((ns_of(ts), size))
        self.emit(rec_virtual(p, logger, tid, ts, 0x0262, base, size, COMMIT))

    def run(self):
        self.w.buffer(0, pad(logfile()), btype=4)
        for p in self.procs:
            self.emit(rec_process(p.pid, self.tick(), p.name))
        for _ in range(self.nev):
            self.step(self.rnd.choice(self.procs))
        self.end_ns = ns_of(self.ts)
        self.w.close()
        return bytes(self.w.out)


def window(p, a, b):
    """The four lifetime types of the blocks for the window [a, b] (ns), as WPA classifies."""
    t = {k: [0, 0] for k in ("AIFI", "AIFO", "AOFI", "AOFO")}
    for alloc, free, size in p.blocks:
        if alloc > b or (free is not None and free < a):
            continue
        k = ("AI" if alloc >= a else "AO") + ("FI" if free is not None and free <= b else "FO")
        t[k][0] += 1
        t[k][1] += size
    live = [size for alloc, free, size in p.blocks if alloc <= b and (free is None or free > b)]
    return {"types": t, "count": t["AIFI"][0] + t["AIFO"][0],
            "outstanding_count": len(live)}


def at(events, t):
    return sum(d[1] for d in events if d[0] <= t), sum(d[2] for d in events if d[0] <= t)


def model(g, seed):
    r = random.Random(seed ^ 0x5A5A)
    end_ms = g.end_ns // 1000000
    out = {"end_ns": g.end_ns, "procs": []}
    for p in g.procs:
        wins = []
        for _ in range(4):
            a, b = sorted(r.sample(range(0, end_ms + 2), 2))
            w = window(p, a * 1000000, b * 1000000)
            w.update({"range": "%dms:%dms" % (a, b)})
            wins.append(w)
        tl = []
        for s in range(0, g.end_ns // 100000000 + 1):
            t = s * 100000000
            heap, count = at(p.sizes, t)
            tl.append({"t": t, "heap": heap, "heap_count": count,
                       "committed": sum(d[1] for d in p.commits if d[0] <= t)})
        out["procs"].append({
            "pid": p.pid, "name": p.name, "session": "%s.%d" % (p.name, p.pid),
            "outstanding": sum(p.live.values()), "outstanding_count": len(p.live),
            "committed": sum(p.regions.values()), "allocs": len(p.blocks),
            "windows": wins, "timeline": tl})
    return out


def ctl(*args):
    r = subprocess.run([os.environ["HT_CTL"], "--json"] + list(args), capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise SystemExit("heaptracectl %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                           r.stderr.strip()))
    return json.loads(r.stdout)


def check(m):
    bad, n = [], [0]

    def eq(what, got, want):
        n[0] += 1
        if got != want:
            bad.append("%s: got %r, expected %r" % (what, got, want))

    for p in m["procs"]:
        s = p["session"]
        st = ctl("status", s)
        eq(s + " pid", st["process"]["pid"], p["pid"])
        eq(s + " name", st["process"]["name"], p["name"])
        eq(s + " outstanding", st["heap"]["outstanding"], p["outstanding"])
        eq(s + " outstanding_count", st["heap"]["outstanding_count"], p["outstanding_count"])
        eq(s + " committed", st["commits"]["committed"], p["committed"])
        eq(s + " allocs", ctl("stacks", s)["total"]["count"], p["allocs"])
        for w in p["windows"]:
            tot = ctl("stacks", s, "--range", w["range"])["total"]
            eq(s + " " + w["range"] + " count", tot["count"], w["count"])
            eq(s + " " + w["range"] + " outstanding_count", tot["outstanding_count"],
               w["outstanding_count"])
            for k, (c, z) in w["types"].items():
                got = tot["types"].get(k, {"count": 0, "size": 0})
                eq("%s %s %s count" % (s, w["range"], k), got["count"], c)
                eq("%s %s %s size" % (s, w["range"], k), got["size"], z)
                one = ctl("stacks", s, "--range", w["range"], "--type", k)["total"]
                got = one["types"].get(k, {"count": 0, "size": 0})
                eq("%s %s --type %s count" % (s, w["range"], k), got["count"], c)
                eq("%s %s --type %s size" % (s, w["range"], k), got["size"], z)
        tl = ctl("timeline", s, "--step", "100ms")["samples"]
        for want in p["timeline"]:
            got = [x for x in tl if x["t"] == want["t"]]
            if not got:
                continue  # the timeline ends at the session's last event
            for k in ("heap", "heap_count", "committed"):
                eq("%s timeline %dms %s" % (s, want["t"] // 1000000, k), got[0][k], want[k])
    for line in bad[:30]:
        print(line)
    if bad:
        raise SystemExit("%d differences in %d comparisons" % (len(bad), n[0]))
    print("%d comparisons, all equal" % n[0])


def small_file(out, procs):
    """procs: (pid, image, [(sec, what, addr, size)]) with what "start", "end", "alloc",
    "free"; written in time order, each process on its own processor, the last process on
    the first processor (a reader that takes the processors in turn sees it first)."""
    w = Writer(False)
    w.buffer(0, pad(logfile()), btype=4)
    recs = []
    for cpu, (pid, name, evs) in enumerate(procs):
        p = Proc(pid, name, False)
        for sec, what, addr, size in evs:
            ts = min(T0 + int(sec * S), 2**64 - 1)
            r = {"start": lambda: rec_process(pid, ts, name),
                 "end": lambda: rec_process(pid, ts, name, end=True),
                 "alloc": lambda: rec_alloc(p, p.tids[0], ts, addr, size),
                 # its stack a key (size) reference, and that key's Rundown (addr: a frame)
                 "kalloc": lambda: rec_alloc(p, p.tids[0], ts, addr, 1)[:1] +
                 [rec_key_ref(p, None, ts, size)],
                 "rundown": lambda: [rec_key_def(0x1824, ts, size, [addr, addr + 16])],
                 "free": lambda: rec_free(p, p.tids[0], ts, addr)}[what]()
            recs.append((ts, (len(procs) - 1 - cpu) % NCPU, r))
    for ts, cpu, r in sorted(recs, key=lambda x: x[0]):
        w.add(cpu, r)
    w.close()
    with open(out, "wb") as f:
        f.write(w.out)


def reuse(out):
    """Windows reuses process ids: pid 500 is first.exe (two blocks, 100 B and a 1 B block
    whose stack is key 0x77's, defined by the Rundown at the trace's end; ends at 0.5 s),
    then second.exe (its own block at first.exe's address, a free of an address it never
    allocated; ends at 1.8 s), then first.exe again (50 B)."""
    small_file(out, [
        (500, "first.exe", [(0.1, "start", 0, 0), (0.2, "alloc", 0x100000, 100),
                            (0.3, "kalloc", 0x100100, 0x77), (0.5, "end", 0, 0),
                            (2.5, "rundown", 0x7FF000777000, 0x77)]),
        (500, "second.exe", [(1.0, "start", 0, 0), (1.2, "alloc", 0x100000, 1000),
                             (1.3, "free", 0x100100, 0), (1.8, "end", 0, 0)]),
        (500, "first.exe", [(2.0, "start", 0, 0), (2.2, "alloc", 0x100000, 50)])])


def reuse_full(out):
    """reuse's pid 500 after 4095 other processes (Process Starts only): its second process
    is the 4097th, past the ctl's list."""
    small_file(out, [(10000 + i, "f%d.exe" % i, [(0.01, "start", 0, 0)]) for i in range(4095)] + [
        (500, "first.exe", [(0.1, "start", 0, 0), (0.2, "alloc", 0x100000, 100),
                            (0.5, "end", 0, 0)]),
        (500, "second.exe", [(1.0, "start", 0, 0), (1.2, "alloc", 0x100000, 1000),
                             (1.3, "free", 0x100100, 0)])])


def ts_max(out):
    """late.exe (pid 700): an allocation at 0.2 s, another whose time is 2^64-1 ticks."""
    small_file(out, [(700, "late.exe", [(0.1, "start", 0, 0), (0.2, "alloc", 0x1000, 100),
                                        (2.0**64 / S, "alloc", 0x2000, 200)])])


def ts_back(out):
    """back.exe (pid 800): on one processor an allocation at 0.5 s, then one at 0.3 s."""
    p = Proc(800, "back.exe", False)
    w = Writer(False)
    w.buffer(0, pad(logfile()), btype=4)
    w.add(0, rec_process(p.pid, T0 + S // 10, p.name))
    w.add(0, rec_alloc(p, p.tids[0], T0 + S // 2, 0x1000, 100))
    w.add(0, rec_alloc(p, p.tids[0], T0 + 3 * S // 10, 0x2000, 200))
    w.close()
    with open(out, "wb") as f:
        f.write(w.out)


def names(out):
    """Image names a hostile file may hold: longer than a session name, a terminal escape,
    a newline."""
    small_file(out, [
        (601, "L" * 200 + ".exe", [(0.1, "start", 0, 0), (0.2, "alloc", 0x1000, 100)]),
        (602, "esc\x1b[31mred.exe", [(0.1, "start", 0, 0), (0.3, "alloc", 0x1000, 200)]),
        (603, "new\nline.exe", [(0.1, "start", 0, 0), (0.4, "alloc", 0x1000, 300)])])


def rec_key_ref(p, tid, ts, key):
    return hdr_perfinfo(0x1826, ts, struct.pack("<QIIQ", ts, p.pid, p.tids[0] if tid is None
                                                else tid, key), False)


def rec_key_def(hook, ts, key, frames):
    return hdr_perfinfo(hook, ts, struct.pack("<Q%dQ" % len(frames), key, *frames), False)


def keys(out, model_out, seed, n, undefined, creates=False):
    """One process's allocations whose stacks are stack-key references (0x1826) to a few
    key values: a key leaves the cache with a Delete (0x1823) carrying its frames, after its
    references, and its value is used again for other frames; a Rundown (0x1824) at the end
    defines the keys still cached. Each reference takes the first definition of its key that
    comes after it (docs/formats.md). undefined: that many more allocations whose keys are
    never defined, spread among the others. creates: a key entering the cache comes with a
    Create (0x1822) of its frames first, and now and then a cached key is created again with
    other frames (references after it take those). The model: per stack (its frames), count
    and bytes of the allocations."""
    r = random.Random(seed)
    p = Proc(4321, "keys.exe", False)
    w = Writer(False)
    w.buffer(0, pad(logfile()), btype=4)
    ts = T0 + 1
    w.add(0, rec_process(p.pid, ts, p.name))
    cached = {}      # key -> (frames, [(size)]) waiting for its definition
    stacks = {}      # frames tuple -> [count, bytes]
    nextkey = [0xFFFF900000000000]  # never one of the pool's

    def frames_new():
        return [0x7FF000000000 + r.randrange(1 << 20) * 16 for _ in range(r.randrange(2, 9))]

    def define(hook, key):
        fr, sizes = cached.pop(key)
        if hook != 0x1822:  # a Create of other frames: it defines the next ones
            w.add(r.randrange(NCPU), [rec_key_def(hook, ts, key, fr)])
        st = stacks.setdefault(tuple(fr), [0, 0])
        st[0] += len(sizes)
        st[1] += sum(sizes)

    pool = [0xFFFF800000001000 + 0x40 * i for i in range(16)]
    total = n + undefined
    und = set(r.sample(range(total), undefined))
    for i in range(total):
        ts += r.randrange(1, 50)
        size = r.randrange(1, 5000)
        addr = p.next_addr
        p.next_addr += 16 * ((size + 31) // 16)
        create = []
        if i in und:
            key = nextkey[0]
            nextkey[0] += 0x40
        else:
            key = r.choice(pool)
            if creates and key in cached and r.random() < 0.01:
                define(0x1822, key)  # redefined while cached: its references so far
            if key not in cached:
                cached[key] = (frames_new(), [])
                if creates:  # logged before the reference, on its processor
                    create = [rec_key_def(0x1822, ts, key, cached[key][0])]
            cached[key][1].append(size)
        cpu = r.randrange(NCPU)
        w.add(cpu, create + [hdr_system(0x1021, p.tids[0], p.pid, ts,
                                        struct.pack("<QQQI", HEAP, size, addr, 3), False),
                             rec_key_ref(p, None, ts, key)])
        if r.random() < 0.02 and cached:
            ts += 1
            define(0x1823, r.choice(list(cached)))
    ts += 10
    for key in list(cached):
        define(0x1824, key)
    w.close()
    with open(out, "wb") as f:
        f.write(w.out)
    with open(model_out, "w") as f:
        json.dump({"session": "%s.%d" % (p.name, p.pid), "allocs": total, "undefined": undefined,
                   "stacks": [[["0x%x" % x for x in k], v[0], v[1]] for k, v in stacks.items()]}, f)


def forged(out, model_out):
    """A key reference's allocation (100 B, key defined later), then an allocation whose
    inline stack (0x1820) is two frames a hostile file chose: the non-canonical address the
    reader marks key references with inside, and the first reference's id."""
    p = Proc(4321, "keys.exe", False)
    w = Writer(False)
    w.buffer(0, pad(logfile()), btype=4)
    key, frames = 0xFFFF800000001000, [0x7FF000001000, 0x7FF000002000]
    at = lambda sec: T0 + int(sec * S)
    w.add(0, rec_process(p.pid, at(0.05), p.name))
    w.add(0, [hdr_system(0x1021, p.tids[0], p.pid, at(0.1),
                         struct.pack("<QQQI", HEAP, 100, 0x100000, 3), False),
              rec_key_ref(p, None, at(0.1), key)])
    stack = struct.pack("<QIIQQ", at(0.2), p.pid, p.tids[0], 0xFFFF7E7E7E7E7E7E,
                        0xFFFF000000000001)
    w.add(0, [hdr_system(0x1021, p.tids[0], p.pid, at(0.2),
                         struct.pack("<QQQI", HEAP, 200, 0x100100, 3), False),
              hdr_perfinfo(0x1820, at(0.2), stack, False)])
    w.add(0, [rec_key_def(0x1823, at(0.3), key, frames)])
    w.close()
    with open(out, "wb") as f:
        f.write(w.out)
    with open(model_out, "w") as f:
        json.dump({"session": "%s.%d" % (p.name, p.pid), "allocs": 2, "undefined": 1,
                   "stacks": [[["0x%x" % x for x in frames], 1, 100]]}, f)


def check_keys(m, dropped=0):
    """Every stack of the model with its count and bytes; the undefined ones without:
    dropped of them (gave up waiting, said by load) as stack_drops, the rest no_stack."""
    s = m["session"]
    got = {}
    for row in ctl("stacks", s, "--by", "stack", "--top", "10000")["rows"]:
        got[tuple(row["frames"])] = [row["count"], row["size"]]
    bad = 0
    for frames, count, size in m["stacks"]:
        g = got.get(tuple(frames))
        if g != [count, size]:
            bad += 1
            if bad < 10:
                print("stack %s: got %r, expected %r" % (frames[:2], g, [count, size]))
    tot = ctl("stacks", s)["total"]
    if tot["count"] != m["allocs"]:
        bad += 1
        print("allocations: got %d, expected %d" % (tot["count"], m["allocs"]))
    q = ctl("status", s)["quality"]
    if q["no_stack"] != m["undefined"] - dropped:
        bad += 1
        print("no_stack: got %d, expected %d" % (q["no_stack"], m["undefined"] - dropped))
    if q["stack_drops"] != dropped:
        bad += 1
        print("stack_drops: got %d, expected %d" % (q["stack_drops"], dropped))
    if bad:
        raise SystemExit("%d differences" % bad)
    print("%d stacks, all equal" % len(m["stacks"]))


def main():
    if sys.argv[1] == "keys":
        und = int(sys.argv[sys.argv.index("--undefined") + 1]) if "--undefined" in sys.argv else 0
        keys(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), und,
             "--creates" in sys.argv)
    elif sys.argv[1] == "forged":
        forged(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "check-keys":
        with open(sys.argv[2]) as f:
            check_keys(json.load(f), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    elif sys.argv[1] in ("reuse", "reuse-full", "names", "ts-max", "ts-back"):
        {"reuse": reuse, "reuse-full": reuse_full, "names": names, "ts-max": ts_max,
         "ts-back": ts_back}[sys.argv[1]](sys.argv[2])
    elif sys.argv[1] == "gen":
        nev = int(sys.argv[sys.argv.index("--events") + 1]) if "--events" in sys.argv else 2000
        seed = int(sys.argv[4])
        g = Gen(seed, nev, "--xpress" in sys.argv)
        with open(sys.argv[2], "wb") as f:
            f.write(g.run())
        with open(sys.argv[3], "w") as f:
            json.dump(model(g, seed), f)
    else:
        with open(sys.argv[2]) as f:
            check(json.load(f))


main()

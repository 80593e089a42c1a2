#!/usr/bin/env python3
"""A synthetic Windows .etl for benchmarks (bench/etl/bench-etl.sh): one process's heap
allocations and frees with an inline stack each, over 4 processors, in 64 KiB buffers,
from the documented layouts (WMI_BUFFER_HEADER, SYSTEM/PERFINFO records,
TRACE_LOGFILE_HEADER; ntwmi.h's packed ETW_HEAP_EVENT_* payloads; PerfView's
StackWalkStackTraceData). Optionally XPRESS buffers ([MS-XCA] plain LZ77, literals only:
the container's cost, not a compressor's ratio). With --keys, the stacks go by stack key
(Windows 8 and later stack caching; PerfView's StackWalkRefTraceData and
StackWalkDefTraceData): a user key reference (0x1826) after each allocation, the key's
frames in a KeyDelete (0x1823) when it leaves a cache of CACHE keys (first in, first out;
the key is then reused for the next stack cached), so after its references, and a
KeyRundown (0x1824) at the end for the keys still cached.
usage: make-etl.py OUT.etl PAIRS [--xpress] [--keys]"""
import random
import struct
import sys

BUF = 65536
NCPU = 4
PID = 4242
CACHE = 256  # keys cached: fewer than the 500 stacks, so that keys leave and come back


def system(hook, tid, ts, payload):
    return struct.pack("<HBBHHIIQII", 2, 2, 0xC0, 0x20 + len(payload), hook, tid, PID, ts, 0,
                       0) + payload


def perfinfo(hook, ts, payload):
    return struct.pack("<HBBHHQ", 2, 0x11, 0xC0, 0x10 + len(payload), hook, ts) + payload


def pad(r):
    return r + b"\xff" * (-len(r) % 8)


def logfile():
    h = bytearray(300)
    struct.pack_into("<I4BII", h, 0, BUF, 10, 0, 1, 5, 19041, NCPU)
    struct.pack_into("<II", h, 44, 8, 0)
    struct.pack_into("<QQII", h, 256, 10000000, 132000000000000000, 1, 0)
    return system(0, 0, 1000, bytes(h))


def xpress(data):
    out = bytearray()
    for i in range(0, len(data), 32):
        out += b"\0\0\0\0" + data[i:i + 32]
    return bytes(out)


class Writer:
    def __init__(self, f, compress):
        self.f, self.compress, self.seq = f, compress, 0
        self.body = [bytearray() for _ in range(NCPU)]

    def buffer(self, cpu, body, btype=0, state=0):
        self.seq += 1
        end = 0x48 + len(body)
        hdr = bytearray(0x48)
        flags = 0
        data = bytes(body)
        if self.compress and btype != 4:
            data, flags = xpress(data), 0x40
        size = 0x48 + len(data) if flags else BUF
        struct.pack_into("<II", hdr, 0, size, end)
        struct.pack_into("<Q", hdr, 0x18, self.seq)
        hdr[0x28] = cpu
        struct.pack_into("<I", hdr, 0x2C, state)
        struct.pack_into("<IHH", hdr, 0x30, end, flags, btype)
        out = bytes(hdr) + data
        self.f.write(out if flags else out.ljust(BUF, b"\xff"))

    def add(self, cpu, rec):
        if 0x48 + len(self.body[cpu]) + len(rec) > BUF:
            self.buffer(cpu, self.body[cpu])
            self.body[cpu] = bytearray()
        self.body[cpu] += rec

    def close(self):
        for cpu in range(NCPU):
            if self.body[cpu]:
                self.buffer(cpu, self.body[cpu])


class Keys:
    """The stack cache: each stack's key while it is cached, its definition when it leaves."""

    def __init__(self, w, stacks):
        self.w, self.stacks, self.cache, self.next = w, stacks, {}, 0x1000

    def key(self, cpu, ts, s):
        if s in self.cache:
            return self.cache[s]
        if len(self.cache) == CACHE:
            old = next(iter(self.cache))  # dicts keep their order: the first cached
            key = self.cache.pop(old)
            self.define(cpu, 0x1823, ts, old, key)
        else:
            self.next += 16
            key = self.next
        # A key names a slot of the cache: the one that left is given to the new stack
        # (PerfView's trace defines its 1,077 keys 2,921 times).
        self.cache[s] = key
        return key

    def define(self, cpu, hook, ts, s, key):
        st = self.stacks[s]
        self.w.add(cpu, pad(perfinfo(hook, ts, struct.pack("<Q%dQ" % len(st), key, *st))))

    def rundown(self, ts):
        for s, key in self.cache.items():
            self.define(0, 0x1824, ts, s, key)


def main():
    out, pairs, compress = sys.argv[1], int(sys.argv[2]), "--xpress" in sys.argv
    use_keys = "--keys" in sys.argv
    rnd = random.Random(1)
    stacks = [[0x7FF000000000 + rnd.randrange(1 << 24) for _ in range(rnd.randrange(4, 24))]
              for _ in range(500)]
    with open(out, "wb") as f:
        w = Writer(f, compress)
        w.buffer(0, pad(logfile()), btype=4, state=3 if compress else 0)
        keys = Keys(w, stacks) if use_keys else None
        live, ts, heap = [], 2000, 0x10000
        for i in range(2 * pairs):
            ts += 10
            cpu = (i // 64) % NCPU
            tid = 100 + cpu
            if live and (len(live) > 5000 or rnd.random() < 0.5):
                addr = live.pop(rnd.randrange(len(live)))
                w.add(cpu, pad(system(0x1024, tid, ts, struct.pack("<QQI", heap, addr, 3))))
                continue
            addr = 0x100000000 + 64 * i
            live.append(addr)
            size = 16 * rnd.randrange(1, 64)
            w.add(cpu, pad(system(0x1021, tid, ts, struct.pack("<QQQI", heap, size, addr, 3))))
            si = rnd.randrange(len(stacks))
            if keys:
                key = keys.key(cpu, ts, si)
                w.add(cpu, pad(perfinfo(0x1826, ts, struct.pack("<QIIQ", ts, PID, tid, key))))
                continue
            st = stacks[si]
            w.add(cpu, pad(perfinfo(0x1820, ts, struct.pack("<QII", ts, PID, tid) +
                                    struct.pack("<%dQ" % len(st), *st))))
        if keys:
            keys.rundown(ts + 10)
        w.close()


main()

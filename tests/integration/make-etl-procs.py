#!/usr/bin/env python3
"""A Windows .etl with several processes for tests/integration/cases-etlsess.sh: Process
Start events naming Alpha.exe (pid 8), beta.exe (pid 99) and idle.exe (pid 77, no heap
event), then heap allocations and frees with inline stacks, a VirtualAlloc of pid 8 logged
by another process's thread, over 3 s of trace time (QPC at 10 MHz). Layouts as
tests/fuzz/make-etl-seeds.py: WMI_BUFFER_HEADER, SYSTEM/PERFINFO records,
TRACE_LOGFILE_HEADER; ntwmi.h's packed ETW_HEAP_EVENT_* payloads; PerfView's
StackWalkStackTraceData and ProcessTraceData (version 2: UniqueProcessKey, ProcessId,
ParentId, SessionId, ExitStatus, a u32 0 for no SID, ImageFileName, CommandLine).
usage: make-etl-procs.py OUT.etl"""
import struct
import sys

BUF = 8192
S = 10000000  # ticks per second: the header's PerfFreq
T0 = 1000     # the header record's time: trace time 0


def system(hook, tid, pid, ts, payload):
    return struct.pack("<HBBHHIIQII", 2, 2, 0xC0, 0x20 + len(payload), hook, tid, pid, ts, 0,
                       0) + payload


def perfinfo(hook, ts, payload):
    return struct.pack("<HBBHHQ", 2, 0x11, 0xC0, 0x10 + len(payload), hook, ts) + payload


def logfile():
    h = bytearray(300)
    struct.pack_into("<I4BII", h, 0, BUF, 10, 0, 1, 5, 19041, 1)
    struct.pack_into("<II", h, 44, 8, 0)
    struct.pack_into("<QQII", h, 256, S, 132000000000000000, 1, 0)
    return system(0, 0, 0, T0, bytes(h))


def buffer(recs, cpu, seq, btype=0, saved=None):
    body = b"".join(r + b"\xff" * (-len(r) % 8) for r in recs)
    end = 0x48 + len(body)
    hdr = bytearray(0x48)
    struct.pack_into("<II", hdr, 0, BUF, saved or end)
    struct.pack_into("<Q", hdr, 0x18, seq)
    hdr[0x28] = cpu
    struct.pack_into("<IHH", hdr, 0x30, end, 0, btype)
    assert end <= BUF
    return (bytes(hdr) + body).ljust(BUF, b"\xff")


def process(pid, ts, name):
    return system(0x0301, 1, pid, ts, struct.pack("<QIIIII", 0xFFFF0000 + pid, pid, 4, 1, 0, 0)
                  + name + b"\0" + "x\0".encode("utf-16-le"))


def at(sec):
    return T0 + int(sec * S)


def alloc(pid, tid, sec, addr, size, frame):
    ts = at(sec)
    return [system(0x1021, tid, pid, ts, struct.pack("<QQQI", 0x10000, size, addr, 3)),
            perfinfo(0x1820, ts, struct.pack("<QIIQQ", ts, pid, tid, 0x7FF000001000, frame))]


def free(pid, tid, sec, addr):
    return [system(0x1024, tid, pid, at(sec), struct.pack("<QQI", 0x10000, addr, 3))]


def main():
    first = logfile()
    saved = 0x48 + len(first) + (-len(first) % 8)
    recs = [process(77, at(0.01), b"idle.exe"), process(8, at(0.02), b"Alpha.exe"),
            process(99, at(0.03), b"beta.exe")]
    recs += alloc(8, 7, 0.5, 0x20000, 100, 0x7FF000002000)
    recs += alloc(99, 5, 1.2, 0x30000, 1000, 0x7FF000003000)
    recs += alloc(8, 7, 1.4, 0x20100, 200, 0x7FF000002400)
    recs += alloc(8, 7, 1.6, 0x20200, 300, 0x7FF000002800)
    # VirtualAlloc of pid 8 (BaseAddress, RegionSize, ProcessId, Flags=MEM_COMMIT) logged by
    # a thread of pid 77: the owner is the payload's.
    recs.append(perfinfo(0x0262, at(1.8), struct.pack("<QQII", 0x100000, 0x10000, 8, 0x1000)))
    recs += alloc(99, 5, 2.2, 0x30100, 2000, 0x7FF000004000)
    recs += free(8, 7, 2.5, 0x20000)
    recs += alloc(8, 7, 2.7, 0x20300, 400, 0x7FF000002C00)
    with open(sys.argv[1], "wb") as f:
        f.write(buffer([first], 0, 1, btype=4, saved=saved) + buffer(recs, 0, 2))


main()

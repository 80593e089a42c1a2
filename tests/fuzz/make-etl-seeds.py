#!/usr/bin/env python3
"""Writes the seed corpus of the etl fuzz target (corpus/etl): small .etl files built from the
layouts (WMI_BUFFER_HEADER, SYSTEM/PERFINFO/EVENT_HEADER records, TRACE_LOGFILE_HEADER), one
valid and the rest each hostile in one way. usage: make-etl-seeds.py DIR"""
import os
import struct
import sys

BUF = 8192


def system(p64, hook, tid, pid, ts, payload):
    h = struct.pack("<HBBHHIIQII", 2, 2 if p64 else 1, 0xC0, 0x20 + len(payload), hook, tid,
                    pid, ts, 0, 0)
    return h + payload


def perfinfo(hook, ts, payload, version=2):
    return struct.pack("<HBBHHQ", version, 0x11, 0xC0, 0x10 + len(payload), hook, ts) + payload


def event_header(ts, ext, payload, flags=0x0001):
    guid = bytes(range(16))
    desc = struct.pack("<HBBBBHQ", 7, 0, 0, 4, 1, 0, 0)
    h = struct.pack("<HBBHHIIQ", 0x50 + len(ext) + len(payload), 0x13, 0xC0, flags, 0, 1, 2, ts)
    return h + guid + desc + struct.pack("<Q", 0) + bytes(16) + ext + payload


def logfile(ncpu=2, events_lost=0, buffers_lost=0):
    h = bytearray(300)
    struct.pack_into("<I4BII", h, 0, BUF, 10, 0, 1, 5, 19041, ncpu)
    struct.pack_into("<II", h, 44, 8, events_lost)
    struct.pack_into("<QQII", h, 256, 10000000, 132000000000000000, 1, buffers_lost)
    return system(True, 0, 0, 0, 1000, bytes(h))


def records(recs):
    out = b""
    for r in recs:
        out += r + b"\xff" * (-len(r) % 8)
    return out


def xpress_literals(data):
    """A valid XPRESS stream ([MS-XCA] 2.4) of literals only: a zero flag word per 32 bytes."""
    out = b""
    for i in range(0, len(data), 32):
        out += b"\0\0\0\0" + data[i:i + 32]
    return out


def buffer(recs, cpu, seq, flags=0, btype=0, saved=None, filled=None, compress=False,
           state=0, size=None, stream=None):
    body = records(recs)
    end = 0x48 + len(body)
    hdr = bytearray(0x48)
    if compress:
        z = stream if stream is not None else xpress_literals(body)
        struct.pack_into("<II", hdr, 0, size or 0x48 + len(z), saved or end)
        flags |= 0x40
    else:
        struct.pack_into("<II", hdr, 0, size or BUF, saved or end)
    struct.pack_into("<Q", hdr, 0x18, seq)
    hdr[0x28] = cpu & 0xFF
    if flags & 0x20:
        struct.pack_into("<H", hdr, 0x28, cpu)
    struct.pack_into("<I", hdr, 0x2C, state)
    struct.pack_into("<IHH", hdr, 0x30, filled or end, flags, btype)
    if compress:
        return bytes(hdr) + z
    return (bytes(hdr) + body).ljust(BUF, b"\xff")


def header_buffer(extra=(), state=3, **kw):
    first = logfile(**kw)
    saved = 0x48 + len(records([first]))
    return buffer([first] + list(extra), 0, 1, btype=4, saved=saved, state=state)


def valid():
    pl = bytes(24)
    return (header_buffer([perfinfo(0x0F2E, 1500, bytes(16))], events_lost=3, buffers_lost=1) +
            buffer([system(True, 0x0301, 7, 8, 4000, pl), system(False, 0x0302, 7, 8, 5000,
                                                                  pl[:12])], 1, 3, flags=0x02) +
            buffer([perfinfo(0x1820, 2000, pl), perfinfo(0x1825, 4500, pl)], 0, 2, flags=0x04,
                   compress=True) +
            buffer([system(True, 0x030A, 7, 8, 3000, pl)], 1, 2))


def heap_two_processes():
    """Heap and VirtualAlloc events of processes 8 and 99 with inline stacks, a WOW64
    (SYSTEM32) alloc, processor 1's buffer compressed and flagged BUFFER_LOST, EventsLost 2:
    the file tests/integration/cases-etl.sh loads. Payloads per ntwmi.h's ETW_HEAP_EVENT_*
    (packed) and PERFINFO_VIRTUAL_ALLOC; StackWalk per PerfView's StackWalkStackTraceData."""
    def heap(hook, p64, pid, tid, ts, ptrs, last=3):
        fmt = "<" + ("Q" if p64 else "I") * len(ptrs) + "I"
        return system(p64, hook, tid, pid, ts, struct.pack(fmt, *ptrs, last))

    def stack(pid, tid, ts, *frames):
        return perfinfo(0x1820, ts, struct.pack("<QII", ts, pid, tid) +
                        b"".join(struct.pack("<Q", f) for f in frames))
    cpu0 = [heap(0x1020, True, 8, 7, 1100, [0x10000], 0),
            heap(0x1021, True, 8, 7, 2000, [0x10000, 64, 0x20000]),
            stack(8, 7, 2000, 0x7FF000001000, 0x7FF000002000),
            heap(0x1021, True, 8, 7, 2100, [0x10000, 96, 0x20100]),
            stack(8, 7, 2100, 0x7FF000001000, 0x7FF000002400),
            heap(0x1024, True, 8, 7, 4000, [0x10000, 0x20000]),
            perfinfo(0x0262, 4500, struct.pack("<QQII", 0x100000, 0x10000, 8, 0x1000)),
            heap(0x1021, True, 99, 5, 5000, [0x10000, 32, 0x30000]),
            stack(99, 5, 5000, 0x7FF000003000, 0x7FF000004000)]
    cpu1 = [heap(0x1021, False, 8, 9, 3000, [0x3000, 16, 0x5000]),
            stack(8, 9, 3000, 0x401000, 0x402000)]
    return (header_buffer(events_lost=2, buffers_lost=1) + buffer(cpu0, 0, 2) +
            buffer(cpu1, 1, 3, flags=0x04, compress=True))


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    seeds = {}
    v = valid()
    seeds["valid-two-cpus"] = v
    seeds["truncated-mid-buffer"] = v[:BUF + 1000]
    b = bytearray(v)
    struct.pack_into("<I", b, BUF, 0x7FFFFFFF)
    seeds["buffer-size-past-eof"] = bytes(b)
    b = bytearray(v)
    struct.pack_into("<I", b, BUF, 0)
    seeds["buffer-size-zero"] = bytes(b)
    b = bytearray(v)
    struct.pack_into("<H", b, BUF + 0x48 + 4, 0xFFFF)
    seeds["record-size-past-end"] = bytes(b)
    b = bytearray(v)
    struct.pack_into("<I", b, BUF + 0x30, 0xFFFFFF)
    seeds["filled-past-buffer"] = bytes(b)
    # A compressed buffer whose stream expands past its stated size: one literal, then a
    # match of 2^20 + 3 bytes (u32 length form).
    boom = b"\0\0\0\x40a\x07\x00\x0f\xff\x00\x00\x00\x00\x10\x00"
    seeds["xpress-expands-past-size"] = header_buffer() + buffer(
        [perfinfo(0x1820, 2000, bytes(24))], 0, 2, compress=True, stream=boom)
    seeds["xpress-saved-huge"] = header_buffer() + buffer(
        [perfinfo(0x1820, 2000, bytes(24))], 0, 2, compress=True, saved=0xFFFFFFF0)
    seeds["xpress-match-before-start"] = header_buffer() + buffer(
        [perfinfo(0x1820, 2000, bytes(24))], 0, 2, compress=True, stream=b"\0\0\0\x80\0\0")
    seeds["compression-lznt1"] = header_buffer(state=2) + buffer(
        [perfinfo(0x1820, 2000, bytes(24))], 0, 2, compress=True)
    # Stack key references to 190 distinct keys, never defined: more than the target's cap.
    refs = [perfinfo(0x1826, 2000 + i, struct.pack("<QIIQ", 2000 + i, 8, 7, 0x1000 + i))
            for i in range(190)]
    seeds["many-pending-key-refs"] = header_buffer() + buffer(refs, 0, 2)
    seeds["event-ext-items-lie"] = header_buffer() + buffer(
        [event_header(2000, struct.pack("<HHHH", 0, 6, 1, 0x4000), b"")], 0, 2)
    seeds["perfinfo-pmc-past-size"] = header_buffer() + buffer(
        [perfinfo(0x0F2E, 2000, bytes(8), version=0x8702)], 0, 2)
    seeds["proc-index-high"] = header_buffer() + buffer(
        [perfinfo(0x0F2E, 2000, bytes(8))], 0x7FF, 2, flags=0x20)
    seeds["same-sequence"] = header_buffer() + buffer(
        [perfinfo(0x0F2E, 2000, bytes(8))], 0, 1) + buffer([perfinfo(0x0F2E, 2001, bytes(8))], 0, 1)
    wpp = struct.pack("<HBB", 16, 0x00, 0x80) + bytes(12)
    unknown = struct.pack("<HBB", 16, 0x42, 0xC0) + bytes(12)
    seeds["wpp-then-unknown-type"] = header_buffer() + buffer(
        [wpp, perfinfo(0x0F2E, 2000, bytes(8)), unknown], 0, 2)
    seeds["heap-two-processes"] = heap_two_processes()
    seeds["no-header-record"] = buffer([perfinfo(0x0F2E, 2000, bytes(8))], 0, 1, btype=4)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


main()

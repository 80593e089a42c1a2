#!/usr/bin/env python3
"""Write tests/data/memorytestapp.htev: the MemoryTestApp run of seed 000 as a recorded stream.

What the stream holds (times in ns from the start, ~30 s in all), after the
Microsoft WPA lab ("Exercise 2 - Track User Mode Process
Allocations"):
  - main commits 10 MiB at the start and keeps it;
  - main commits another 10 MiB halfway (t = 15 s) and keeps it;
  - ManipulateTemporaryBuffer (called by Operation1, called by main) commits
    10 MiB ten times, evenly spaced (t = 1.5 s + 3 s * k), each released
    100 ms later;
  - InnerLoopOperation (called by main) allocates 40-byte blocks with operator
    new steadily through the run, 1200 in all, never freed;
  - Initialize allocates 50 blocks of 1 KiB at startup, freed at 0.5 s (transient);
  - private bytes sampled every 500 ms.
Deterministic: running it again writes the same bytes.
"""
import json
import sys

MS = 1_000_000
S = 1_000_000_000
MIB = 1 << 20
APP = "MemoryTestApp.exe"
THREAD_BASE = ["kernel32.dll!BaseThreadInitThunk", "ntdll.dll!RtlUserThreadStart"]
NEW = ["ntdll.dll!RtlAllocateHeap", "ucrtbase.dll!malloc", APP + "!operator new"]
VALLOC = ["KernelBase.dll!VirtualAlloc"]


def stack(*frames):
    return list(frames) + THREAD_BASE


def main(out):
    ev = []
    main_stack = stack(*VALLOC, APP + "!main")
    temp_stack = stack(*VALLOC, APP + "!ManipulateTemporaryBuffer", APP + "!Operation1", APP + "!main")
    inner_stack = stack(*NEW, APP + "!InnerLoopOperation", APP + "!main")
    init_stack = stack(*NEW, APP + "!Initialize", APP + "!main")
    heap = "0x1d0000"
    crt_heap = "0x2a0000"

    ev.append((50 * MS, {"ev": "commit", "tid": 7, "addr": "0x20000000", "size": 10 * MIB, "stack": main_stack}))
    ev.append((15 * S, {"ev": "commit", "tid": 7, "addr": "0x30000000", "size": 10 * MIB, "stack": main_stack}))
    for k in range(10):
        t = 1500 * MS + k * 3 * S
        ev.append((t, {"ev": "commit", "tid": 7, "addr": "0x40000000", "size": 10 * MIB, "stack": temp_stack}))
        ev.append((t + 100 * MS, {"ev": "release", "tid": 7, "addr": "0x40000000", "size": 10 * MIB}))
    for i in range(50):
        addr = "0x%x" % (0x2a1000 + i * 0x410)
        ev.append((10 * MS + i * MS // 10, {"ev": "alloc", "tid": 7, "heap": crt_heap, "addr": addr, "size": 1024, "stack": init_stack}))
        ev.append((500 * MS, {"ev": "free", "tid": 7, "heap": crt_heap, "addr": addr}))
    for i in range(1200):
        t = 100 * MS + i * 24500 * 1000  # every 24.5 ms
        addr = "0x%x" % (0x1d1000 + i * 0x30)
        ev.append((t, {"ev": "alloc", "tid": 7, "heap": heap, "addr": addr, "size": 40, "stack": inner_stack}))

    # Private bytes every 500 ms: a 2 MiB image base plus what is live then.
    def live_at(t):
        b = 2 * MIB
        if t >= 50 * MS:
            b += 10 * MIB
        if t >= 15 * S:
            b += 10 * MIB
        for k in range(10):
            s = 1500 * MS + k * 3 * S
            if s <= t < s + 100 * MS:
                b += 10 * MIB
        n = sum(1 for i in range(1200) if 100 * MS + i * 24500 * 1000 <= t)
        b += ((n * 48 + 4095) // 4096) * 4096
        return b

    for k in range(1, 60):
        t = k * 500 * MS
        ev.append((t, {"ev": "private_bytes", "bytes": live_at(t)}))

    ev.sort(key=lambda e: e[0])  # stable: equal times keep their order
    with open(out, "w") as f:
        f.write(json.dumps({"ev": "process", "pid": 4242, "name": APP, "wall": "2026-11-22T10:00:00Z"}, separators=(",", ":")) + "\n")
        for t, e in ev:
            rec = {"t": t}
            rec.update(e)
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        f.write(json.dumps({"t": 30 * S, "ev": "exit", "code": 0}, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/memorytestapp.htev")

#!/usr/bin/env python3
"""Checks an ht-convert --stats summary of a real trace (real-trace.sh).

Every trace: 0 errors, no buffer skipped, every buffer the header says was written, records in
time order after the merge, every referenced stack key defined.

With PerfView's baseline (perfview_net.4.5.2.x64.baseline.txt, made on Windows through
OpenTrace and TraceEvent): each of its COUNT lines is either compared with the raw count of one
event kind, or excluded below with the reason. A COUNT line in neither list fails the test, so
each is a decision.
usage: check-stats.py STATS.json [BASELINE.txt]
"""
import json
import re
import sys

# Kernel records: HookId = Group << 8 | Type (ntwmi.h EVENT_TRACE_GROUP_* and the
# PERFINFO_LOG_TYPE_* / WMI_LOG_TYPE_* values). Image/Load is 0x030A in the Process group:
# consumers show it under the Image provider.
HOOK = {
    "Windows Kernel/EventTrace": 0x0000,  # the log-file header record
    "Windows Kernel/EventTrace/Extension": 0x0005,
    "Windows Kernel/EventTrace/RundownComplete": 0x0008,
    "Windows Kernel/EventTrace/EndExtension": 0x0020,
    "Windows Kernel/DiskIO/Read": 0x010A,
    "Windows Kernel/DiskIO/Write": 0x010B,
    "Windows Kernel/DiskIO/ReadInit": 0x010C,
    "Windows Kernel/DiskIO/WriteInit": 0x010D,
    "Windows Kernel/DiskIO/FlushBuffers": 0x010E,
    "Windows Kernel/DiskIO/FlushInit": 0x010F,
    "Windows Kernel/Memory/HardFault": 0x0220,
    "Windows Kernel/Process/Start": 0x0301,
    "Windows Kernel/Process/Stop": 0x0302,
    "Windows Kernel/Process/DCStart": 0x0303,
    "Windows Kernel/Process/DCStop": 0x0304,
    "Windows Kernel/Image/Load": 0x030A,
    "Windows Kernel/Process/PerfCtr": 0x0320,
    "Windows Kernel/Process/PerfCtrRundown": 0x0321,
    "Windows Kernel/Process/Defunct": 0x0327,
    "Windows Kernel/Thread/Start": 0x0501,
    "Windows Kernel/Thread/Stop": 0x0502,
    "Windows Kernel/TcpIp/SendIPV6": 0x061A,
    "Windows Kernel/TcpIp/RecvIPV6": 0x061B,
    "Windows Kernel/UdpIp/Send": 0x080A,
    "Windows Kernel/UdpIp/Recv": 0x080B,
    "Windows Kernel/UdpIp/SendIPV6": 0x081A,
    "Windows Kernel/UdpIp/RecvIPV6": 0x081B,
    "Windows Kernel/SystemConfig/CPU": 0x0B0A,
    "Windows Kernel/SystemConfig/PhyDisk": 0x0B0B,
    "Windows Kernel/SystemConfig/LogDisk": 0x0B0C,
    "Windows Kernel/SystemConfig/NIC": 0x0B0D,
    "Windows Kernel/SystemConfig/Services": 0x0B0F,
    "Windows Kernel/SystemConfig/Power": 0x0B10,
    "Windows Kernel/SystemConfig/Network": 0x0B11,
    "Windows Kernel/SystemConfig/PnP": 0x0B16,
    "Windows Kernel/SystemConfig/IDEChannel": 0x0B17,
    "Windows Kernel/PerfInfo/CollectionStart": 0x0F49,
    "Windows Kernel/PerfInfo/CollectionEnd": 0x0F4A,
    "Windows Kernel/Image/Unload": 0x1402,
    "Windows Kernel/Image/DCStart": 0x1403,
    "Windows Kernel/Image/DCStop": 0x1404,
    "MSNT_SystemTrace/Image/KernelBase": 0x1421,
}

KTC = "b3e675d7-2554-4f18-830b-2762732560de"  # KernelTraceControl ImageID (classic)
META = "bbccf6c1-6cd1-48c4-80ff-839482e37671"  # KernelTraceControl MetaData (classic)
SYSCFG = "9b79ee91-b5fd-41c0-a243-4248e266e9d0"  # SysConfig (classic)
# Classic (EVENT_TRACE_HEADER) records: GUID and Class.Type, from PerfView's
# KernelTraceControl and SysConfig parsers (microsoft/perfview, src/TraceEvent/Parsers).
CLASSIC = {
    "KernelTraceControl/ImageID": (KTC, 0),
    "KernelTraceControl/ImageID/None": (KTC, 32),
    "KernelTraceControl/ImageID/DbgID_RSDS": (KTC, 36),
    "KernelTraceControl/ImageID/DbgID_ILRSDS": (KTC, 37),
    "KernelTraceControl/ImageID/FileVersion": (KTC, 64),
    "KernelTraceControl/MetaData/EventInfo": (META, 32),
    "KernelTraceControl/MetaData/EventMapInfo": (META, 33),
    "Windows Kernel/SysConfig/BuildInfo": (SYSCFG, 32),
    "Windows Kernel/SysConfig/SystemPaths": (SYSCFG, 33),
    "Windows Kernel/SysConfig/UnknownVolume": (SYSCFG, 34),
    "Windows Kernel/SysConfig/VolumeMapping": (SYSCFG, 35),
    "Windows Kernel/SysConfig/Opcode(37)": (SYSCFG, 37),
}

CLR = "e13c0d23-ccbc-4e12-931b-d9cc2eee27e4"  # Microsoft-Windows-DotNETRuntime
RUNDOWN = "a669021c-c450-4609-a035-5af59af4df18"  # Microsoft-Windows-DotNETRuntimeRundown
# Manifest (EVENT_HEADER) records: provider GUID and EVENT_DESCRIPTOR.Id, from the .NET
# runtime's published event ids (learn.microsoft.com, "Runtime events": garbage collection,
# loader, method, exception, thread pool and runtime information events, and their rundown).
MANIFEST = {
    "Microsoft-Windows-DotNETRuntime/GC/Start": (CLR, 1),
    "Microsoft-Windows-DotNETRuntime/GC/Stop": (CLR, 2),
    "Microsoft-Windows-DotNETRuntime/GC/RestartEEStop": (CLR, 3),
    "Microsoft-Windows-DotNETRuntime/GC/HeapStats": (CLR, 4),
    "Microsoft-Windows-DotNETRuntime/GC/CreateSegment": (CLR, 5),
    "Microsoft-Windows-DotNETRuntime/GC/RestartEEStart": (CLR, 7),
    "Microsoft-Windows-DotNETRuntime/GC/SuspendEEStop": (CLR, 8),
    "Microsoft-Windows-DotNETRuntime/GC/SuspendEEStart": (CLR, 9),
    "Microsoft-Windows-DotNETRuntime/GC/AllocationTick": (CLR, 10),
    "Microsoft-Windows-DotNETRuntime/GC/TerminateConcurrentThread": (CLR, 12),
    "Microsoft-Windows-DotNETRuntime/GC/FinalizersStop": (CLR, 13),
    "Microsoft-Windows-DotNETRuntime/GC/FinalizersStart": (CLR, 14),
    "Microsoft-Windows-DotNETRuntime/Type/BulkType": (CLR, 15),
    "Microsoft-Windows-DotNETRuntime/GC/BulkSurvivingObjectRanges": (CLR, 21),
    "Microsoft-Windows-DotNETRuntime/GC/BulkMovedObjectRanges": (CLR, 22),
    "Microsoft-Windows-DotNETRuntime/GC/GenerationRange": (CLR, 23),
    "Microsoft-Windows-DotNETRuntime/GC/FinalizeObject": (CLR, 29),
    "Microsoft-Windows-DotNETRuntime/GC/PinObjectAtGCTime": (CLR, 33),
    "Microsoft-Windows-DotNETRuntime/GC/Triggered": (CLR, 35),
    "Microsoft-Windows-DotNETRuntime/ThreadPoolWorkerThread/Start": (CLR, 50),
    "Microsoft-Windows-DotNETRuntime/Exception/Start": (CLR, 80),
    "Microsoft-Windows-DotNETRuntime/AppDomainResourceManagement/ThreadCreated": (CLR, 85),
    "Microsoft-Windows-DotNETRuntime/Method/LoadVerbose": (CLR, 143),
    "Microsoft-Windows-DotNETRuntime/Method/UnloadVerbose": (CLR, 144),
    "Microsoft-Windows-DotNETRuntime/Method/JittingStarted": (CLR, 145),
    "Microsoft-Windows-DotNETRuntime/Loader/DomainModuleLoad": (CLR, 151),
    "Microsoft-Windows-DotNETRuntime/Loader/ModuleLoad": (CLR, 152),
    "Microsoft-Windows-DotNETRuntime/Loader/ModuleUnload": (CLR, 153),
    "Microsoft-Windows-DotNETRuntime/Loader/AssemblyLoad": (CLR, 154),
    "Microsoft-Windows-DotNETRuntime/Loader/AssemblyUnload": (CLR, 155),
    "Microsoft-Windows-DotNETRuntime/Loader/AppDomainLoad": (CLR, 156),
    "Microsoft-Windows-DotNETRuntime/Loader/AppDomainUnload": (CLR, 157),
    "Microsoft-Windows-DotNETRuntime/Runtime/Start": (CLR, 187),
    "Microsoft-Windows-DotNETRuntime/GarbageCollection/IncreaseMemoryPressure": (CLR, 200),
    "Microsoft-Windows-DotNETRuntimeRundown/Method/DCStopComplete": (RUNDOWN, 146),
    "Microsoft-Windows-DotNETRuntimeRundown/Method/DCStopInit": (RUNDOWN, 148),
    "Microsoft-Windows-DotNETRuntimeRundown/Loader/DomainModuleDCStop": (RUNDOWN, 152),
    "Microsoft-Windows-DotNETRuntimeRundown/Loader/ModuleDCStop": (RUNDOWN, 154),
    "Microsoft-Windows-DotNETRuntimeRundown/Loader/AssemblyDCStop": (RUNDOWN, 156),
    "Microsoft-Windows-DotNETRuntimeRundown/Loader/AppDomainDCStop": (RUNDOWN, 158),
    "Microsoft-Windows-DotNETRuntimeRundown/Runtime/Start": (RUNDOWN, 187),
}

# Lines not compared, by name prefix, and why.
EXCLUDED = [
    ("Windows Kernel/PerfInfo/Sample",
     "TraceLog keeps only the samples of the processes it was asked about and folds the rest"),
    ("Microsoft-Windows-DotNETRuntime/GC/Mark",
     "private GC mark events: their ids are not in the runtime's published event list"),
    ("Microsoft-Windows-DotNETRuntimePrivate/",
     "the runtime's private provider: no published event ids to map names to"),
    ("Microsoft-Windows-DNS-Client/", "manifest not public here: names cannot be mapped to ids"),
    ("Microsoft-Windows-Immersive-Shell/", "manifest not public here"),
    ("Microsoft-Windows-Kernel-EventTracing/", "manifest not public here"),
    ("Microsoft-Windows-Kernel-File/", "manifest not public here"),
    ("Microsoft-Windows-Kernel-Process/", "manifest not public here"),
    ("PerfView/", "PerfView's EventSource: ids follow its method order, not published"),
    ("System.Diagnostics.Eventing.FrameworkEventSource/",
     "an EventSource: ids follow its method order, and ManifestData is split into chunks"),
    ("System.Threading.Tasks.TplEventSource/", "an EventSource: ids not published"),
    ("MSNT_SystemTrace/SystemConfig/Platform",
     "a SystemConfig record whose type is not in ntwmi.h's list"),
]


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def invariants(st):
    if st["errors_total"] != 0:
        fail("errors: %s" % json.dumps(st["errors"]))
    if st["buffers_skipped"] != 0:
        fail("%d buffers skipped" % st["buffers_skipped"])
    if st["buffers_with_data_past_end"] != 0:
        # The relogger's header buffer has events between SavedOffset and Offset: a reader
        # that stopped at SavedOffset would leave them here.
        fail("%d buffers hold data past the end of their records"
             % st["buffers_with_data_past_end"])
    if st["buffers"] != st["header"]["buffers_written"]:
        fail("%d buffers read, the header says %d were written"
             % (st["buffers"], st["header"]["buffers_written"]))
    if st["out_of_order"] != 0:
        fail("%d records out of time order after the merge" % st["out_of_order"])
    if st["records"] == 0:
        fail("no records")
    s = st["stacks"]
    if s["unresolved_keys"] != 0 or s["keys_dropped"] != 0 or s["short_records"] != 0:
        fail("stack keys: %s" % json.dumps(s))


def counts(st):
    by_hook, by_classic, by_id = {}, {}, {}
    for e in st["events"]:
        if "hook" in e:
            by_hook[int(e["hook"], 16)] = by_hook.get(int(e["hook"], 16), 0) + e["count"]
        else:
            k = (e["guid"], e["opcode"])
            by_classic[k] = by_classic.get(k, 0) + e["count"]
            k = (e["guid"], e["id"])
            by_id[k] = by_id.get(k, 0) + e["count"]
    return by_hook, by_classic, by_id


def baseline(st, path):
    by_hook, by_classic, by_id = counts(st)
    compared = 0
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"COUNT (.*):(\d+)$", line.strip())
        if not m:
            continue
        name, want = m.group(1), int(m.group(2))
        if name in HOOK:
            got = by_hook.get(HOOK[name], 0)
        elif name in CLASSIC:
            got = by_classic.get(CLASSIC[name], 0)
        elif name in MANIFEST:
            got = by_id.get(MANIFEST[name], 0)
        elif any(name.startswith(p) for p, _ in EXCLUDED):
            continue
        else:
            fail("baseline line %r is neither compared nor excluded" % name)
        if got != want:
            fail("%s: %d read, PerfView counts %d" % (name, got, want))
        compared += 1
    if compared != len(HOOK) + len(CLASSIC) + len(MANIFEST):
        fail("%d baseline lines compared, %d expected"
             % (compared, len(HOOK) + len(CLASSIC) + len(MANIFEST)))
    s = st["stacks"]
    if s["key_refs"] == 0 or s["distinct_keys"] == 0:
        fail("the PerfView trace's stack keys were not seen: %s" % json.dumps(s))
    print("%d PerfView counts equal; %d stack keys, all defined" % (compared, s["distinct_keys"]))


def main():
    st = json.load(open(sys.argv[1]))
    invariants(st)
    if len(sys.argv) > 2:
        baseline(st, sys.argv[2])
    print("ok: %d records, %d buffers (%d compressed), 0 errors"
          % (st["records"], st["buffers"], st["compressed_buffers"]))


main()

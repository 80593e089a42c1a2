/* Longer help for commands whose options need explaining: printed by
 * 'heaptracectl help COMMAND' after the option list. */
#include "ctl.h"

#include <string.h>

static const char start_notes[] =
    "\n"
    "Live tracing on Linux attaches eBPF uprobes to a running process (root, or\n"
    "CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE; a kernel with BTF). No restart, no\n"
    "injection; other processes are not affected.\n"
    "\n"
    "Stacks (--stacks):\n"
    "  auto   the default. At attach, each module's call frame information\n"
    "         (.eh_frame) is read: when every module keeps frame pointers the\n"
    "         stacks are taken as fp, else (stock Debian: libc, libstdc++ and most\n"
    "         packages are built without them) as dwarf. status shows the mode\n"
    "         chosen and why (source_status.stacks, stacks_why).\n"
    "  fp     frame pointers are walked in the BPF program when each allocation\n"
    "         returns (so the immediate caller is right), up to --stack-depth\n"
    "         frames (1-256, default 256; the eBPF walk itself stops at 127\n"
    "         frames, and a stack cut there counts as truncated_stacks). Through\n"
    "         code built without frame pointers the walk reads data: it stops at\n"
    "         the first frame outside the process's executable mappings (counted:\n"
    "         stacks_outside_exec, truncated_stacks).\n"
    "         libc's strdup/getline and libstdc++'s operator new get an extra entry\n"
    "         probe so their stacks still start at their caller.\n"
    "  dwarf  copies the top 8 KiB of the user stack at each allocation (up to\n"
    "         the stack's end when it is nearer) and unwinds it in the daemon with\n"
    "         the modules' DWARF CFI (libdw): full stacks without frame pointers,\n"
    "         about 5 us of daemon CPU per stack; a stack deeper than the copy is\n"
    "         cut (counted: stacks_copy_short, truncated_stacks).\n"
    "  none   no stacks: cheapest, every row is one unknown stack.\n"
    "\n"
    "Cost: every probed call traps into the kernel. On a hypervisor that makes\n"
    "traps dear (these test machines: ~18 us per malloc+free pair) a target\n"
    "making more than ~50k allocations a second slows down noticeably; see the\n"
    "README's benchmark. Events the kernel ring could not take are counted as\n"
    "lost in every reply's data quality, never silently dropped.\n"
    "\n"
    "Commits: private writable anonymous mmap (and mprotect to writable) count as\n"
    "commits, PROT_NONE reservations do not, munmap releases; regions the\n"
    "allocator maps for itself belong to the heap and are not counted twice.\n"
    "Private bytes (triggers, timeline) are VmData + VmStk from /proc/PID/status.\n";

/* One line per counter of a status reply's "quality" (the daemon builds it in
 * quality_json, daemon/server/query-args.c); integration.ctl_help_quality
 * fails when a counter a daemon reports is not here. */
static const char status_notes[] =
    "\n"
    "Data quality (the \"quality\" line: counters that are not zero; --json shows\n"
    "them all). Nothing is dropped without being counted under one of these:\n"
    "  events               events applied to the session (not a loss)\n"
    "  lost                 events the source lost before the daemon saw them (the\n"
    "                       kernel ring or ETW buffers were full; \"lost\" lines of a\n"
    "                       stream); the figures miss them\n"
    "  unknown_frees        frees and reallocs of addresses the session never saw\n"
    "                       allocated: blocks from before the attach, or a lost alloc\n"
    "  dup_allocs           allocations of an address that was still live: its free\n"
    "                       was missed (lost); the old block is taken as freed\n"
    "  no_stack             allocations and commits that came without a stack\n"
    "  truncated_stacks     stacks cut at the depth limit (--stack-depth, or the\n"
    "                       source's own: 127 frames for eBPF, 8 KiB copy for dwarf)\n"
    "  cap_drops            allocations not tracked one by one at the allocation\n"
    "                       table's cap; shown per stack as \"untracked\"\n"
    "  commit_cap_drops     commits not tracked at the commit table's cap\n"
    "  stack_drops          allocations and commits whose stack was dropped (the\n"
    "                       stack or name table full, the budget, no memory)\n"
    "  decommit_unknown     decommits and releases of ranges not known as committed\n"
    "  bad_size             events with an impossible size, dropped\n"
    "  time_backwards       events stamped earlier than one already applied (CPUs'\n"
    "                       records merged slightly out of order, a stream not in\n"
    "                       time order): applied at the latest time seen instead,\n"
    "                       so windows and the timeline place them a little late\n"
    "  malformed            records a source could not decode, skipped\n"
    "  heap_overflow        events on heaps past the heap limit, dropped\n"
    "  malformed_lines      lines of a loaded stream that did not parse, skipped\n"
    "                       (the first ones are listed under ingest)\n"
    "  ring_drops           lifetime records (alloc/free times for windows) not\n"
    "                       kept for lack of memory or budget: windows over them\n"
    "                       say complete: false\n"
    "  commit_split_drops   committed pieces lost when a partial decommit split a\n"
    "                       range past the table's slack\n"
    "  stack_table_drops    new stacks not kept at max_stacks\n"
    "  string_drops         new frame or module names not kept at max_strings\n"
    "  long_names           distinct names cut at max_name_len\n"
    "  invalid_utf8_names   distinct names that were not UTF-8, kept with U+FFFD\n"
    "                       for each bad byte\n"
    "  budget_drops         growths refused at the memory budget (what was refused\n"
    "                       is under memory.over_budget)\n"
    "  no_memory_drops      growths refused because memory could not be allocated\n"
    "                       (under memory.no_memory)\n"
    "  timeline_drops       timeline samples not kept for lack of memory or budget\n"
    "  snapshots_over_budget  trigger snapshots not kept: over the memory budget\n"
    "  recorder_drops       events a recorder (record) was not sent: no memory for\n"
    "                       them, or its connection was closing\n";

const char *ctl_help_notes(const char *cmd)
{
    if (!strcmp(cmd, "start"))
        return start_notes;
    if (!strcmp(cmd, "status"))
        return status_notes;
    return NULL;
}

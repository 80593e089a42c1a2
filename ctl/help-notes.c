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
    "         frames (at most 127). Through code built without frame pointers the\n"
    "         walk reads data; it stops at the first frame outside the process's\n"
    "         executable mappings (counted: stacks_outside_exec, truncated_stacks).\n"
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

const char *ctl_help_notes(const char *cmd)
{
    if (!strcmp(cmd, "start"))
        return start_notes;
    return NULL;
}

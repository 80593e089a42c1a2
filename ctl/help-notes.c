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
    "  fp     the default. Frame pointers are walked in the BPF program when each\n"
    "         allocation returns (so the immediate caller is right), up to\n"
    "         --stack-depth frames (at most 127). Code built without frame\n"
    "         pointers (Debian's libc and libstdc++, most -O2 builds) ends the walk\n"
    "         early; libc's strdup/getline and libstdc++'s operator new get an\n"
    "         extra entry probe so their stacks still start at their caller; other\n"
    "         such functions lose it.\n"
    "  dwarf  copies the top 8 KiB of the user stack at each allocation and\n"
    "         unwinds it in the daemon with the modules' DWARF CFI (libdw): full\n"
    "         stacks without frame pointers, about 5 us of daemon CPU per stack;\n"
    "         frames beyond the 8 KiB copy are cut (counted as truncated).\n"
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

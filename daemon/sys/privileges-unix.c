/* Unix: no privilege to enable. A capability is in the effective set or it
 * is not (nothing like AdjustTokenPrivileges turns one on), and the eBPF
 * source already says which it lacks (tracer.c bpf_tracer_available, shown by
 * version's "sources"), so the list is empty. */
#include "privileges.h"

#include <stddef.h>

int privileges_enable(void)
{
    return 0;
}

const struct privilege *privileges_list(unsigned *n)
{
    *n = 0;
    return NULL;
}

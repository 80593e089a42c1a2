/* Platform: asking for huge pages behind a memory region (huge-pages-linux.c;
 * huge-pages-win.c on Windows). */
#ifndef HUGE_PAGES_H
#define HUGE_PAGES_H

#include <stddef.h>

/*
 * Advice only, never an error: mem (2 MiB aligned) to mem + len (a multiple
 * of 2 MiB) is ordinary heap memory that the query scratch keeps between
 * queries, and faulting it in by 2 MiB pages instead of 4 KiB ones is what
 * made a cold query cheap (query-scratch.h).
 * Linux: madvise(MADV_HUGEPAGE); where transparent huge pages are off the
 * pages stay 4 KiB.
 * Windows: nothing. Large pages there exist only as VirtualAlloc
 * MEM_LARGE_PAGES allocations, made whole, up front, with
 * SeLockMemoryPrivilege; a heap region cannot be advised into them.
 */
void ht_huge_pages_advise(void *mem, size_t len);

#endif

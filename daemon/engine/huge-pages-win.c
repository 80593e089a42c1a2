/* Windows huge page advice (huge-pages.h): none to give.
 * Large pages are VirtualAlloc(MEM_LARGE_PAGES) allocations only, which need
 * SeLockMemoryPrivilege and are committed whole and never paged out
 * (https://learn.microsoft.com/en-us/windows/win32/memory/large-page-support);
 * the scratch's regions are heap memory and keep 4 KiB pages. */
#include "huge-pages.h"

void ht_huge_pages_advise(void *mem, size_t len)
{
    (void)mem;
    (void)len;
}

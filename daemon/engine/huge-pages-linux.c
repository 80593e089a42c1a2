/* Linux huge page advice (huge-pages.h): transparent huge pages. */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "huge-pages.h"

#include <sys/mman.h>

void ht_huge_pages_advise(void *mem, size_t len)
{
    /* Advice only: where THP is off, pages are 4 KiB. */
    (void)madvise(mem, len, MADV_HUGEPAGE);
}

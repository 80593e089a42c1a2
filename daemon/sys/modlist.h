/*
 * The module list both symbolizers keep (symbols-linux.c, symbols-win.c): an
 * array sorted by start whose [start, end) ranges do not overlap. Each
 * platform's element type begins with `uint64_t start, end` (checked there);
 * the rest of it is the platform's own. Header-only: two users, no state.
 */
#ifndef MODLIST_H
#define MODLIST_H

#include "ht-error.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct modlist_range {
    uint64_t start, end;
};

static inline const struct modlist_range *modlist_el(const void *v, size_t size, size_t i)
{
    return (const struct modlist_range *)((const char *)v + i * size);
}

/* Index of the first element with start > addr. */
static inline size_t modlist_upper(const void *v, size_t n, size_t size, uint64_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (modlist_el(v, size, mid)->start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index of the element holding addr, or n. */
static inline size_t modlist_find(const void *v, size_t n, size_t size, uint64_t addr)
{
    size_t i = modlist_upper(v, n, size, addr);
    return i == 0 || addr >= modlist_el(v, size, i - 1)->end ? n : i - 1;
}

/* Where [start, end) goes: the elements it overlaps are dropped through
 * drop(arg, i), which removes element i and lowers *n, when replace; else
 * nothing changes and HT_EEXIST is returned. The index, or HT_EEXIST. */
static inline long modlist_place(const void *const *v, const size_t *n, size_t size,
                                 uint64_t start, uint64_t end, int replace,
                                 void (*drop)(void *arg, size_t i), void *arg)
{
    size_t i = modlist_upper(*v, *n, size, start);
    while (i > 0 && modlist_el(*v, size, i - 1)->end > start) {
        if (!replace)
            return HT_EEXIST;
        drop(arg, --i);
    }
    while (i < *n && modlist_el(*v, size, i)->start < end) {
        if (!replace)
            return HT_EEXIST;
        drop(arg, i);
    }
    return (long)i;
}

/* Open a slot at i (elements from i move up one; capacity is the caller's). */
static inline void *modlist_open(void *v, size_t n, size_t size, size_t i)
{
    char *p = (char *)v + i * size;
    memmove(p + size, p, (n - i) * size);
    return p;
}

/* Close the slot at i (elements after it move down one). */
static inline void modlist_close(void *v, size_t n, size_t size, size_t i)
{
    char *p = (char *)v + i * size;
    memmove(p, p + size, (n - i - 1) * size);
}

#endif

/* libdlframe-{a,b}.so: one function at the same offset in both, calling
 * malloc with a frame of FRAME bytes: the same return address, different
 * CFI (CFA = rsp + FRAME + ...). dlreload loads one, then the other at the
 * address the first left. Built without frame pointers, like Debian. */
#include <stdint.h>
#include <stdlib.h>

__attribute__((noinline)) void *dlframe_alloc(size_t n)
{
    volatile char pad[FRAME];
    pad[0] = 1;
    void *p = malloc(n);
    if (pad[0] != 1) /* read back: the frame stays */
        abort();
    return p;
}

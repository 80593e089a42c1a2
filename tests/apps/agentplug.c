/* A library agentcase dlopens, allocates through and dlcloses (tests/apps/agentcase.c). */
#include <stdlib.h>

void *volatile plug_last;

/* Not a tail call: the frame stays on the stack. */
__attribute__((noinline)) void *plug_alloc(size_t n)
{
    void *p = malloc(n);
    plug_last = p;
    return p;
}

/* A C program whose function addresses the symbolizer tests resolve (built -O2 -g). */
#include "helper-loop.h"

#define NOINLINE __attribute__((noinline))

volatile int helper_sink;

static const int leaf_line = __LINE__ + 1;
NOINLINE int ht_sym_leaf_one(int x)
{
    helper_sink += x;
    return helper_sink * 3;
}

static NOINLINE int ht_sym_static_two(int x)
{
    helper_sink ^= x;
    return helper_sink + 7;
}

/* Exported (the build lists it in the dynamic symbol table): named even when stripped. */
NOINLINE int ht_sym_exported(int x)
{
    helper_sink -= x;
    return helper_sink - 1;
}

int main(void)
{
    printf("line %d\n", leaf_line);
    helper_put("ht_sym_leaf_one", (const void *)ht_sym_leaf_one);
    helper_put("ht_sym_static_two", (const void *)ht_sym_static_two);
    helper_put("ht_sym_exported", (const void *)ht_sym_exported);
    helper_sink = ht_sym_leaf_one(1) + ht_sym_static_two(2) + ht_sym_exported(3);
    return helper_loop();
}

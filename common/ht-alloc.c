/* Allocation hooks (after uv_replace_allocator): one place to inject failures. */
#include "ht-alloc.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

static ht_malloc_fn hook_malloc = malloc;
static ht_realloc_fn hook_realloc = realloc;
static ht_calloc_fn hook_calloc = calloc;
static ht_free_fn hook_free = free;

void *ht_malloc(size_t n)
{
    return hook_malloc(n ? n : 1);
}

void *ht_calloc(size_t n, size_t size)
{
    return hook_calloc(n ? n : 1, size ? size : 1);
}

void *ht_realloc(void *p, size_t n)
{
    return hook_realloc(p, n ? n : 1);
}

void ht_free(void *p)
{
    hook_free(p);
}

char *ht_strndup(const char *s, size_t n)
{
    char *d = ht_malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *ht_strdup(const char *s)
{
    return ht_strndup(s, strlen(s));
}

void ht_replace_allocator(ht_malloc_fn m, ht_realloc_fn r, ht_calloc_fn c, ht_free_fn f)
{
    hook_malloc = m;
    hook_realloc = r;
    hook_calloc = c;
    hook_free = f;
    ht_alloc_init();
}

void ht_alloc_init(void)
{
    cJSON_Hooks hooks = {ht_malloc, ht_free};
    cJSON_InitHooks(&hooks);
}

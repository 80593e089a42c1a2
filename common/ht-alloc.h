/* Replaceable allocation hooks: every allocation in heaptrace goes through these. */
#ifndef HT_ALLOC_H
#define HT_ALLOC_H

#include <stddef.h>

void *ht_malloc(size_t n);
void *ht_calloc(size_t n, size_t size);
void *ht_realloc(void *p, size_t n);
void ht_free(void *p);
char *ht_strdup(const char *s);
char *ht_strndup(const char *s, size_t n);

typedef void *(*ht_malloc_fn)(size_t);
typedef void *(*ht_realloc_fn)(void *, size_t);
typedef void *(*ht_calloc_fn)(size_t, size_t);
typedef void (*ht_free_fn)(void *);

/* Point cJSON at these hooks; call once at startup. */
void ht_alloc_init(void);
/* Replace the allocator (tests use this to inject failures); also points
 * cJSON and libuv at the same functions when they are linked in. */
void ht_replace_allocator(ht_malloc_fn m, ht_realloc_fn r, ht_calloc_fn c, ht_free_fn f);

#endif

/*
 * mtalloc: the multi-threaded leak program (mtalloc.c, mtalloc-new.cc).
 * Every allocating site is its own noinline function, named in the ground
 * truth. A site's figures are what it still holds at the end (leaks) or what
 * it allocated and freed (transient), as requested sizes.
 *
 * Threads: each worker keeps its own struct mt_truth; main sums them after
 * joining, so there is no sharing.
 */
#ifndef MTALLOC_H
#define MTALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum mt_site {
    /* leaking sites: every block stays live */
    MT_LEAK_MALLOC,
    MT_LEAK_CALLOC,
    MT_LEAK_REALLOC_CHAIN,
    MT_LEAK_POSIX_MEMALIGN,
    MT_LEAK_ALIGNED_ALLOC,
    MT_LEAK_MEMALIGN,
    MT_LEAK_STRDUP,
    MT_LEAK_NEW,
    MT_LEAK_NEW_ARRAY,
    /* transient sites: every block is freed by the same site */
    MT_CHURN_MALLOC,
    MT_CHURN_CALLOC,
    MT_CHURN_REALLOC,
    MT_CHURN_ALIGNED,
    MT_CHURN_NEW,
    MT_CHURN_NEW_ARRAY,
    MT_SITES
};

struct mt_count {
    unsigned long count, bytes;
};

struct mt_truth {
    struct mt_count site[MT_SITES];
};

/* The C++ sites (mtalloc-new.cc). */
void leak_new(struct mt_truth *t, int i);
void leak_new_array(struct mt_truth *t, int i);
void churn_new(struct mt_truth *t, int i);
void churn_new_array(struct mt_truth *t, int i);

extern void *volatile mt_sink;

#ifdef __cplusplus
}
#endif

#endif

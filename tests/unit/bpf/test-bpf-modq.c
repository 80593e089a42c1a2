/* The eBPF source's module queue (modq.h): order, text, its two bounds,
 * its charge, and a pusher and a taker on two threads. */
#include "ht-error.h"
#include "ht-test.h"
#include "mem-acct.h"
#include "modq.h"

#include <stdio.h>
#include <string.h>
#include <uv.h>

static void test_order_and_text(void)
{
    struct modq q;
    CHECK_EQ(modq_init(&q, NULL), 0);
    CHECK_EQ(modq_push(&q, 1, 0x1000, 0x2000, 0x1000, "/lib/liba.so", "abcd"), 0);
    CHECK_EQ(modq_push(&q, 0, 0x5000, 0, 0, "", ""), 0);
    CHECK_EQ(modq_push(&q, 1, 0x3000, 0x4000, 0, "/lib/libc.so", ""), 0);
    struct modq_entry e;
    char text[MODQ_ENTRY_TEXT];
    CHECK_EQ(modq_take(&q, &e, text), 1);
    CHECK(e.load && e.start == 0x1000 && e.end == 0x2000 && e.bias == 0x1000);
    CHECK_STR(text, "/lib/liba.so");
    CHECK_STR(text + e.path_len + 1, "abcd");
    CHECK_EQ(modq_take(&q, &e, text), 1);
    CHECK(!e.load && e.start == 0x5000);
    CHECK_EQ(modq_take(&q, &e, text), 1);
    CHECK_STR(text, "/lib/libc.so");
    CHECK_STR(text + e.path_len + 1, "");
    CHECK_EQ(modq_take(&q, &e, text), 0);
    struct modq_stats st;
    modq_stats(&q, &st);
    CHECK(st.queued == 3 && st.applied == 3 && st.drops == 0 && st.waiting == 0 &&
          st.max_waiting == 3);
    modq_free(&q, NULL);
}

/* MODQ_ENTRIES events wait at most; past it one is dropped and counted; the
 * room comes back once the queue is empty. */
static void test_entries_bound(void)
{
    struct modq q;
    CHECK_EQ(modq_init(&q, NULL), 0);
    for (unsigned i = 0; i < MODQ_ENTRIES; i++)
        CHECK_EQ(modq_push(&q, 0, 0x1000 * (i + 1), 0, 0, "", ""), 0);
    CHECK_EQ(modq_push(&q, 0, 0x999000, 0, 0, "", ""), HT_EFULL);
    struct modq_entry e;
    char text[MODQ_ENTRY_TEXT];
    CHECK_EQ(modq_take(&q, &e, text), 1);
    CHECK_EQ(modq_push(&q, 0, 0x999000, 0, 0, "", ""), HT_EFULL); /* not empty yet */
    unsigned n = 1;
    while (modq_take(&q, &e, text))
        n++;
    CHECK_EQ(n, MODQ_ENTRIES);
    CHECK_EQ(e.start, 0x1000ull * MODQ_ENTRIES);
    CHECK_EQ(modq_push(&q, 0, 0x999000, 0, 0, "", ""), 0);
    struct modq_stats st;
    modq_stats(&q, &st);
    CHECK(st.drops == 2 && st.queued == MODQ_ENTRIES + 1 && st.waiting == 1 &&
          st.max_waiting == MODQ_ENTRIES);
    modq_free(&q, NULL);
}

/* MODQ_TEXT bytes of names at most, MODQ_ENTRY_TEXT per event. */
static void test_text_bound(void)
{
    static char path[MODQ_ENTRY_TEXT + 8];
    struct modq q;
    CHECK_EQ(modq_init(&q, NULL), 0);
    memset(path, 'p', sizeof(path) - 1);
    path[MODQ_ENTRY_TEXT - 1] = '\0'; /* with the build id's NUL: one byte too many */
    CHECK_EQ(modq_push(&q, 1, 0x1000, 0x2000, 0, path, ""), HT_EFULL);
    path[4000] = '\0';
    unsigned fit = MODQ_TEXT / 4002;
    for (unsigned i = 0; i < fit; i++)
        CHECK_EQ(modq_push(&q, 1, 0x1000 * (i + 1), 0x1000 * (i + 2), 0, path, ""), 0);
    CHECK_EQ(modq_push(&q, 1, 0x100000, 0x200000, 0, path, ""), HT_EFULL);
    CHECK_EQ(modq_push(&q, 0, 0x1000, 0, 0, "", ""), 0); /* an unload takes 2 bytes */
    struct modq_entry e;
    char text[MODQ_ENTRY_TEXT];
    unsigned n = 0;
    while (modq_take(&q, &e, text)) {
        if (e.load)
            CHECK_EQ(strlen(text), 4000);
        n++;
    }
    CHECK_EQ(n, fit + 1);
    struct modq_stats st;
    modq_stats(&q, &st);
    CHECK_EQ(st.drops, 2);
    modq_free(&q, NULL);
}

/* Charged as a source buffer; refused whole at the budget. */
static void test_charged(void)
{
    struct mem_budget b;
    struct mem_acct a;
    mem_budget_init(&b, NULL, 0);
    mem_acct_init(&a, &b);
    struct modq q;
    CHECK_EQ(modq_init(&q, &a), 0);
    CHECK(a.bytes[MEM_source_buffers] >= MODQ_TEXT);
    CHECK_EQ(mem_budget_used(&b), a.bytes[MEM_source_buffers]);
    modq_free(&q, &a);
    CHECK_EQ(a.bytes[MEM_source_buffers], 0);
    CHECK_EQ(mem_budget_used(&b), 0);
    mem_acct_close(&a);

    mem_budget_init(&b, NULL, MODQ_TEXT);
    mem_acct_init(&a, &b);
    CHECK_EQ(modq_init(&q, &a), HT_EFULL);
    CHECK_EQ(a.over_budget[MEM_source_buffers], 1);
    modq_free(&q, &a);
    CHECK_EQ(mem_budget_used(&b), 0);
    mem_acct_close(&a);
}

/* The loop pushes while the symbolizer lock's holder takes: every event is
 * taken once, in order, or counted as dropped (run under TSan too). */
#define RACE_EVENTS 20000u

static void pusher(void *arg)
{
    struct modq *q = arg;
    char path[64];
    for (unsigned i = 1; i <= RACE_EVENTS; i++) {
        snprintf(path, sizeof(path), "/lib/lib%u.so", i);
        modq_push(q, 1, i, i + 1, 0, path, "");
    }
}

static void test_two_threads(void)
{
    struct modq q;
    CHECK_EQ(modq_init(&q, NULL), 0);
    uv_thread_t t;
    CHECK_EQ(uv_thread_create(&t, pusher, &q), 0);
    struct modq_entry e;
    char text[MODQ_ENTRY_TEXT], want[64];
    uint64_t last = 0, taken = 0;
    struct modq_stats st;
    for (;;) {
        while (modq_take(&q, &e, text)) {
            CHECK(e.start > last);
            snprintf(want, sizeof(want), "/lib/lib%llu.so", (unsigned long long)e.start);
            CHECK_STR(text, want);
            last = e.start;
            taken++;
        }
        modq_stats(&q, &st);
        if (st.queued + st.drops == RACE_EVENTS && st.waiting == 0)
            break;
    }
    uv_thread_join(&t);
    CHECK_EQ(taken + st.drops, RACE_EVENTS);
    printf("taken %llu, dropped %llu\n", (unsigned long long)taken, (unsigned long long)st.drops);
    modq_free(&q, NULL);
}

HT_TEST_MAIN(T(order_and_text), T(entries_bound), T(text_bound), T(charged), T(two_threads))

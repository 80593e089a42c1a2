/* Ring records -> events, and the region table, with synthetic records (no privilege needed). */
#include "consume.h"
#include "heaptrace-bpf.h"
#include "ht-test.h"
#include "stack-intern.h"

#include <sys/mman.h>

#define MAXEV 64

struct out {
    struct ht_event ev[MAXEV];
    unsigned n;
    struct stack_intern si;
    int stop_after; /* 0: never */
};

static int ev_cb(void *arg, const struct ht_event *ev)
{
    struct out *o = arg;
    if (o->n < MAXEV)
        o->ev[o->n++] = *ev;
    return o->stop_after && o->n >= (unsigned)o->stop_after;
}

static uint32_t stack_cb(void *arg, const uint64_t *frames, unsigned n)
{
    struct out *o = arg;
    return stack_intern_get(&o->si, frames, n);
}

static void setup(struct bpf_consumer *c, struct out *o, uint32_t depth)
{
    memset(o, 0, sizeof(*o));
    stack_intern_init(&o->si, 1024, 1024);
    struct bpf_emit e = {.arg = o, .event = ev_cb, .stack = stack_cb};
    bpf_consumer_init(c, &e, 1000, depth);
}

static void teardown(struct bpf_consumer *c, struct out *o)
{
    bpf_consumer_close(c);
    stack_intern_close(&o->si);
}

/* A record with nframes frames 0x1000, 0x1001, ... after it. */
static int feed5(struct bpf_consumer *c, uint16_t kind, uint8_t fn, uint8_t flags, uint64_t ret,
                 uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, unsigned nframes)
{
    uint8_t buf[sizeof(struct hb_rec) + HB_MAX_FRAMES * 8];
    struct hb_rec r = {.t = 5000, .tid = 42, .kind = kind, .fn = fn, .flags = flags, .ret = ret};
    r.args[0] = a0;
    r.args[1] = a1;
    r.args[2] = a2;
    r.args[3] = a3;
    r.args[4] = a4;
    r.nframes = (uint16_t)nframes;
    memcpy(buf, &r, sizeof(r));
    for (unsigned i = 0; i < nframes; i++) {
        uint64_t f = 0x1000 + i;
        memcpy(buf + sizeof(r) + i * 8, &f, 8);
    }
    return bpf_consume_record(c, buf, sizeof(r) + nframes * 8);
}

static int feed(struct bpf_consumer *c, uint16_t kind, uint8_t fn, uint8_t flags, uint64_t ret,
                uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3, unsigned nframes)
{
    return feed5(c, kind, fn, flags, ret, a0, a1, a2, a3, 0, nframes);
}

static void test_heap_calls(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, 0, 0xa000, 100, 0, 0, 0, 2);
    feed(&c, HB_REC_ALLOC, HB_FN_CALLOC, 0, 0xb000, 3, 259, 0, 0, 2);
    feed(&c, HB_REC_ALLOC, HB_FN_MEMALIGN, 0, 0xc000, 64, 300, 0, 0, 0);
    feed(&c, HB_REC_ALLOC, HB_FN_POSIX_MEMALIGN, 0, 0, 0x7ff0, 64, 555, 0xd000, 0);
    feed(&c, HB_REC_ALLOC, HB_FN_PVALLOC, 0, 0xe000, 10, 0, 0, 0, 0);
    feed(&c, HB_REC_FREE, HB_FN_FREE, 0, 0, 0xa000, 0, 0, 0, 0);
    CHECK_EQ(o.n, 6);
    CHECK_EQ(o.ev[0].kind, HT_EV_ALLOC);
    CHECK_EQ(o.ev[0].addr, 0xa000);
    CHECK_EQ(o.ev[0].size, 100);
    CHECK_EQ(o.ev[0].t, 4000);
    CHECK_EQ(o.ev[0].tid, 42);
    CHECK_EQ(o.ev[0].heap, BPF_HEAP);
    CHECK(o.ev[0].stack != 0);
    CHECK_EQ(o.ev[1].size, 777);
    CHECK_EQ(o.ev[1].stack, o.ev[0].stack); /* the same frames: one interned stack */
    CHECK_EQ(o.ev[2].size, 300);
    CHECK_EQ(o.ev[2].stack, 0);
    CHECK_EQ(o.ev[3].addr, 0xd000);
    CHECK_EQ(o.ev[3].size, 555);
    CHECK_EQ(o.ev[4].size, 4096);
    CHECK_EQ(o.ev[5].kind, HT_EV_FREE);
    CHECK_EQ(o.ev[5].addr, 0xa000);
    CHECK_EQ(c.records, 6);
    teardown(&c, &o);
}

static void test_nested_and_failures(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    /* realloc(NULL, n) is an alloc; realloc(p, n) a realloc; realloc(p, 0) -> NULL frees p;
     * a failed realloc (NULL, n > 0) and a failed malloc produce nothing. */
    feed(&c, HB_REC_ALLOC, HB_FN_REALLOC, 0, 0xa000, 0, 50, 0, 0, 1);
    feed(&c, HB_REC_ALLOC, HB_FN_REALLOC, 0, 0xb000, 0xa000, 90, 0, 0, 1);
    feed(&c, HB_REC_ALLOC, HB_FN_REALLOC, 0, 0, 0xb000, 0, 0, 0, 1);
    feed(&c, HB_REC_ALLOC, HB_FN_REALLOC, 0, 0, 0xc000, 1 << 30, 0, 0, 1);
    feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, 0, 0, 1ull << 50, 0, 0, 0, 1);
    feed(&c, HB_REC_ALLOC, HB_FN_POSIX_MEMALIGN, 0, 12, 0x7ff0, 64, 555, 0, 1);
    feed(&c, HB_REC_ALLOC, HB_FN_REALLOCARRAY, 0, 0xd000, 0, 10, 7, 0, 1);
    feed(&c, HB_REC_FREE, HB_FN_FREE, 0, 0, 0, 0, 0, 0, 0); /* free(NULL) */
    CHECK_EQ(o.n, 4);
    CHECK_EQ(o.ev[0].kind, HT_EV_ALLOC);
    CHECK_EQ(o.ev[0].size, 50);
    CHECK_EQ(o.ev[1].kind, HT_EV_REALLOC);
    CHECK_EQ(o.ev[1].addr, 0xb000);
    CHECK_EQ(o.ev[1].old_addr, 0xa000);
    CHECK_EQ(o.ev[1].size, 90);
    CHECK_EQ(o.ev[2].kind, HT_EV_FREE);
    CHECK_EQ(o.ev[2].addr, 0xb000);
    CHECK_EQ(o.ev[3].kind, HT_EV_ALLOC);
    CHECK_EQ(o.ev[3].size, 70);
    /* The sink asks to stop: the consumer says so. */
    o.stop_after = (int)o.n + 1;
    CHECK_EQ(feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, 0, 0xa000, 1, 0, 0, 0, 1), -1);
    teardown(&c, &o);
}

/* reallocarray(p, n, m) whose n * m overflows fails with ENOMEM and leaves p alone (glibc
 * malloc/reallocarray.c): a wrapped product of 0 must not read as realloc(p, 0) freeing p.
 * calloc's overflow likewise is a failure, never a block. */
static void test_array_overflow(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, 0, 0xa000, 100, 0, 0, 0, 1);
    feed(&c, HB_REC_ALLOC, HB_FN_REALLOCARRAY, 0, 0, 0xa000, 1ull << 32, 1ull << 32, 0, 1);
    feed(&c, HB_REC_ALLOC, HB_FN_REALLOCARRAY, 0, 0, 0xa000, 3, 1ull << 63, 0, 1);
    feed(&c, HB_REC_ALLOC, HB_FN_CALLOC, 0, 0, 1ull << 33, 1ull << 33, 0, 0, 1);
    CHECK_EQ(o.n, 1);
    CHECK_EQ(o.ev[0].kind, HT_EV_ALLOC);
    /* reallocarray(p, 0, n) is realloc(p, 0): p freed. */
    feed(&c, HB_REC_ALLOC, HB_FN_REALLOCARRAY, 0, 0, 0xa000, 0, 16, 0, 1);
    CHECK_EQ(o.n, 2);
    CHECK_EQ(o.ev[1].kind, HT_EV_FREE);
    CHECK_EQ(o.ev[1].addr, 0xa000);
    teardown(&c, &o);
}

/* An exec record ends the conversion: what follows belongs to another program. */
static void test_exec_record(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    CHECK_EQ(feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, 0, 0xa000, 8, 0, 0, 0, 1), 0);
    CHECK_EQ(feed(&c, HB_REC_EXEC, 0, 0, 0, 0, 0, 0, 0, 0), -1);
    CHECK(c.exec_seen);
    CHECK_EQ(c.malformed, 0);
    CHECK_EQ(o.n, 1);
    teardown(&c, &o);
}

static void test_stacks(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 4);
    feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, 0, 0xa000, 1, 0, 0, 0, 10);
    feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, HB_F_TRUNCATED, 0xa100, 1, 0, 0, 0, 3);
    CHECK_EQ(o.n, 2);
    unsigned depth;
    const uint64_t *f = stack_intern_frames(&o.si, o.ev[0].stack, &depth);
    CHECK_EQ(depth, 4); /* cut at the session's depth */
    CHECK_EQ(f[0], 0x1000);
    CHECK_EQ(f[3], 0x1003);
    CHECK(o.ev[0].flags & HT_EVF_TRUNCATED);
    CHECK(o.ev[1].flags & HT_EVF_TRUNCATED); /* the kernel's buffer was full */
    teardown(&c, &o);
}

#define RW (PROT_READ | PROT_WRITE)
#define ANON (MAP_PRIVATE | MAP_ANONYMOUS)

/* A frame-pointer walk through code without frame pointers reads data as
 * return addresses (redis: key bytes 0x3130): the stack stops at the first
 * frame outside every executable mapping, flagged and counted. */
static void test_stacks_outside_exec(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    /* No mapping known yet (synthetic input): nothing is cut. */
    feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, 0, 0xa000, 1, 0, 0, 0, 10);
    CHECK_EQ(c.stacks_outside_exec, 0);
    CHECK_EQ(bpf_consumer_exec_add(&c, 0x1000, 0x1002), 0);
    CHECK_EQ(bpf_consumer_exec_add(&c, 0x1002, 0x1003), 0); /* joins the first */
    CHECK_EQ(bpf_consumer_exec_add(&c, 0x5000, 0x6000), 0);
    CHECK_EQ(c.exec.n, 2);
    CHECK(bpf_consumer_exec_has(&c, 0x1002));
    CHECK(!bpf_consumer_exec_has(&c, 0x1003));
    CHECK(!bpf_consumer_exec_has(&c, 0x4fff));
    CHECK(bpf_consumer_exec_has(&c, 0x5fff));
    feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, 0, 0xa100, 1, 0, 0, 0, 10);
    CHECK_EQ(o.n, 2);
    unsigned depth;
    stack_intern_frames(&o.si, o.ev[1].stack, &depth);
    CHECK_EQ(depth, 3); /* 0x1000..0x1002; 0x1003 is no code */
    CHECK(o.ev[1].flags & HT_EVF_TRUNCATED);
    CHECK_EQ(c.stacks_outside_exec, 1);
    /* Code mapped later (dlopen, a JIT's mprotect): its frames count from
     * the record on, before the maps are read again. */
    feed(&c, HB_REC_MPROTECT, 0, 0, 0, 0x1000, 0x1000, PROT_READ | PROT_EXEC, 0, 0);
    feed(&c, HB_REC_ALLOC, HB_FN_MALLOC, 0, 0xa200, 1, 0, 0, 0, 10);
    CHECK_EQ(o.n, 3);
    stack_intern_frames(&o.si, o.ev[2].stack, &depth);
    CHECK_EQ(depth, 10);
    CHECK(!(o.ev[2].flags & HT_EVF_TRUNCATED));
    CHECK_EQ(c.exec.n, 2); /* [0x1000, 0x2000) took [0x1000, 0x1003) in */
    CHECK_EQ(c.stacks_outside_exec, 1);
    teardown(&c, &o);
}

static void test_regions_commit(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    /* Private writable anonymous mmap: a commit with its stack; munmap of part
     * of it then the rest: releases. A file mapping and a failed mmap: nothing. */
    feed5(&c, HB_REC_MMAP, 0, 0, 0x100000, 0, 0x10000, RW, ANON, (uint64_t)-1, 2);
    feed(&c, HB_REC_MUNMAP, 0, 0, 0, 0x100000, 0x1000, 0, 0, 0);
    feed(&c, HB_REC_MUNMAP, 0, 0, 0, 0x100000, 0x10000, 0, 0, 0);
    feed5(&c, HB_REC_MMAP, 0, 0, 0x200000, 0, 0x1000, PROT_READ, MAP_PRIVATE, 3, 0);
    feed5(&c, HB_REC_MMAP, 0, 0, (uint64_t)-12, 0, 0x1000, RW, ANON, (uint64_t)-1, 0);
    feed(&c, HB_REC_MUNMAP, 0, 0, 0, 0x200000, 0x1000, 0, 0, 0);
    CHECK_EQ(o.n, 3);
    CHECK_EQ(o.ev[0].kind, HT_EV_COMMIT);
    CHECK_EQ(o.ev[0].addr, 0x100000);
    CHECK_EQ(o.ev[0].size, 0x10000);
    CHECK(o.ev[0].stack != 0);
    CHECK_EQ(o.ev[1].kind, HT_EV_RELEASE);
    CHECK_EQ(o.ev[1].addr, 0x100000);
    CHECK_EQ(o.ev[1].size, 0x1000);
    CHECK_EQ(o.ev[2].kind, HT_EV_RELEASE);
    CHECK_EQ(o.ev[2].addr, 0x101000);
    CHECK_EQ(o.ev[2].size, 0xf000);
    CHECK_EQ(c.regions.n, 0);
    /* Lengths round up to pages. */
    feed5(&c, HB_REC_MMAP, 0, 0, 0x300000, 0, 100, RW, ANON, (uint64_t)-1, 0);
    CHECK_EQ(o.ev[3].size, 4096);
    teardown(&c, &o);
}

static void test_regions_heap_owned(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    /* A glibc thread arena: reserved inside malloc, trimmed, committed page by
     * page, released from free (no in-alloc flag): none of it is a commit. */
    feed5(&c, HB_REC_MMAP, 0, HB_F_IN_ALLOC, 0x4000000, 0, 0x8000000, PROT_NONE,
          ANON | MAP_NORESERVE, (uint64_t)-1, 0);
    feed(&c, HB_REC_MUNMAP, 0, HB_F_IN_ALLOC, 0, 0x8000000, 0x4000000, 0, 0, 0);
    for (unsigned i = 0; i < 8; i++)
        feed(&c, HB_REC_MPROTECT, 0, HB_F_IN_ALLOC, 0, 0x4000000 + i * 0x1000, 0x1000, RW, 0, 0);
    feed(&c, HB_REC_MPROTECT, 0, 0, 0, 0x4008000, 0x1000, RW, 0, 0); /* outside the flag */
    feed5(&c, HB_REC_MMAP, 0, HB_F_IN_ALLOC, 0x9000000, 0, 0x300000, RW, ANON, (uint64_t)-1, 0);
    feed(&c, HB_REC_MUNMAP, 0, 0, 0, 0x9000000, 0x300000, 0, 0, 0);
    feed(&c, HB_REC_BRK, 0, HB_F_IN_ALLOC, 0x5000, 0x5000, 0, 0, 0, 0);
    CHECK_EQ(o.n, 0);
    CHECK_EQ(c.regions.n, 1); /* the arena stays one region */
    CHECK_EQ(c.brk_calls, 1);
    teardown(&c, &o);
}

static void test_regions_mprotect(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    /* Reserve (PROT_NONE: no commit), commit two pages, decommit one. */
    feed5(&c, HB_REC_MMAP, 0, 0, 0x100000, 0, 0x10000, PROT_NONE, ANON, (uint64_t)-1, 0);
    feed(&c, HB_REC_MPROTECT, 0, 0, 0, 0x102000, 0x2000, RW, 0, 1);
    feed(&c, HB_REC_MPROTECT, 0, 0, 0, 0x100000, 0x10000, RW, 0, 1); /* the rest */
    feed(&c, HB_REC_MPROTECT, 0, 0, 0, 0x103000, 0x1000, PROT_NONE, 0, 0);
    feed(&c, HB_REC_MPROTECT, 0, 0, (uint64_t)-22, 0x100000, 0x1000, PROT_NONE, 0, 0);
    feed(&c, HB_REC_MPROTECT, 0, 0, 0, 0x900000, 0x1000, RW, 0, 0); /* unknown: ignored */
    CHECK_EQ(o.n, 4);
    CHECK_EQ(o.ev[0].kind, HT_EV_COMMIT);
    CHECK_EQ(o.ev[0].addr, 0x102000);
    CHECK_EQ(o.ev[0].size, 0x2000);
    CHECK(o.ev[0].stack != 0);
    CHECK_EQ(o.ev[1].kind, HT_EV_COMMIT); /* [0x100000, 0x102000) */
    CHECK_EQ(o.ev[1].size, 0x2000);
    CHECK_EQ(o.ev[2].kind, HT_EV_COMMIT); /* [0x104000, 0x110000) */
    CHECK_EQ(o.ev[2].addr, 0x104000);
    CHECK_EQ(o.ev[2].size, 0xc000);
    CHECK_EQ(o.ev[3].kind, HT_EV_DECOMMIT);
    CHECK_EQ(o.ev[3].addr, 0x103000);
    CHECK_EQ(o.ev[3].size, 0x1000);
    teardown(&c, &o);
}

static void test_regions_mremap(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    feed5(&c, HB_REC_MMAP, 0, 0, 0x100000, 0, 0x4000, RW, ANON, (uint64_t)-1, 0);
    feed(&c, HB_REC_MREMAP, 0, 0, 0x500000, 0x100000, 0x4000, 0x8000, 1, 0);
    /* Heap-owned: moved silently. */
    feed5(&c, HB_REC_MMAP, 0, HB_F_IN_ALLOC, 0x700000, 0, 0x4000, RW, ANON, (uint64_t)-1, 0);
    feed(&c, HB_REC_MREMAP, 0, HB_F_IN_ALLOC, 0x800000, 0x700000, 0x4000, 0x8000, 1, 0);
    CHECK_EQ(o.n, 3);
    CHECK_EQ(o.ev[1].kind, HT_EV_RELEASE);
    CHECK_EQ(o.ev[1].addr, 0x100000);
    CHECK_EQ(o.ev[2].kind, HT_EV_COMMIT);
    CHECK_EQ(o.ev[2].addr, 0x500000);
    CHECK_EQ(o.ev[2].size, 0x8000);
    const struct region *g = regions_find(&c.regions, 0x800000);
    CHECK(g && g->heap && g->end == 0x808000);
    CHECK(regions_find(&c.regions, 0x700000) == NULL);
    teardown(&c, &o);
}

static void test_malformed(void)
{
    struct bpf_consumer c;
    struct out o;
    setup(&c, &o, 64);
    uint8_t buf[sizeof(struct hb_rec) + 16] = {0};
    struct hb_rec r = {.kind = HB_REC_ALLOC, .fn = HB_FN_MALLOC, .ret = 1, .nframes = 5};
    memcpy(buf, &r, sizeof(r));
    CHECK_EQ(bpf_consume_record(&c, buf, sizeof(buf)), 0); /* claims 5 frames, has 2 */
    CHECK_EQ(bpf_consume_record(&c, buf, 10), 0);          /* shorter than a header */
    r.nframes = 0;
    r.kind = 99;
    memcpy(buf, &r, sizeof(r));
    CHECK_EQ(bpf_consume_record(&c, buf, sizeof(r)), 0);
    r.kind = HB_REC_ALLOC;
    r.fn = 77;
    memcpy(buf, &r, sizeof(r));
    CHECK_EQ(bpf_consume_record(&c, buf, sizeof(r)), 0);
    CHECK_EQ(c.malformed, 4);
    CHECK_EQ(o.n, 0);
    teardown(&c, &o);
}

HT_TEST_MAIN(T(heap_calls), T(nested_and_failures), T(array_overflow), T(exec_record), T(stacks),
             T(stacks_outside_exec), T(regions_commit), T(regions_heap_owned), T(regions_mprotect),
             T(regions_mremap), T(malformed))

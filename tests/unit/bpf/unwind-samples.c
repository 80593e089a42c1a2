/* Stack copies of this process (built with -fomit-frame-pointer, as Debian builds). */
#define _GNU_SOURCE
#include "unwind-samples.h"

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>
#include <pthread.h>
#include <search.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct unwind_sample *g_s;
static unsigned g_n, g_max;
static unsigned g_every = 1, g_tick;

void ht_snap(struct hb_regs *r);
void ht_snap_copy(struct hb_regs *r);

/* The caller's registers as they will be after ht_snap returns (rip its
 * return address, rsp above it: DWARF numbering, psABI), then the copy,
 * taken from a tail call so the caller's frame is as it was. */
__asm__(".text\n.globl ht_snap\n.type ht_snap,@function\nht_snap:\n"
        "mov %rax,0(%rdi)\n mov %rdx,8(%rdi)\n mov %rcx,16(%rdi)\n mov %rbx,24(%rdi)\n"
        "mov %rsi,32(%rdi)\n mov %rdi,40(%rdi)\n mov %rbp,48(%rdi)\n"
        "lea 8(%rsp),%rax\n mov %rax,56(%rdi)\n"
        "mov %r8,64(%rdi)\n mov %r9,72(%rdi)\n mov %r10,80(%rdi)\n mov %r11,88(%rdi)\n"
        "mov %r12,96(%rdi)\n mov %r13,104(%rdi)\n mov %r14,112(%rdi)\n mov %r15,120(%rdi)\n"
        "mov (%rsp),%rax\n mov %rax,128(%rdi)\n"
        "jmp ht_snap_copy\n.size ht_snap,.-ht_snap\n");

static uint64_t stack_top(void)
{
    pthread_attr_t a;
    void *addr;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &a))
        return 0;
    pthread_attr_getstack(&a, &addr, &size);
    pthread_attr_destroy(&a);
    return (uint64_t)addr + size;
}

void ht_snap_copy(struct hb_regs *r)
{
    struct unwind_sample *s = &g_s[g_n];
    uint64_t top = stack_top(), sp = r->r[7];
    s->regs = *r;
    s->tid = (uint32_t)gettid();
    s->len = top > sp ? (size_t)(top - sp) : 0;
    if (s->len > HB_STACK_COPY)
        s->len = HB_STACK_COPY;
    memcpy(s->stack, (const void *)sp, s->len);
    g_n++;
}

/* A sample every g_every calls, while room is left. */
__attribute__((noinline)) static void snap(void)
{
    if (g_n < g_max && g_tick++ % g_every == 0) {
        struct hb_regs r;
        ht_snap(&r);
    }
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    snap();
    return (x > y) - (x < y);
}

/* Frames of various sizes between the sample and the library: recursion
 * the compiler can neither inline nor turn into a loop. */
__attribute__((noinline)) static int nest(int depth, void (*fn)(void *), void *arg)
{
    volatile char pad[64 + (depth % 5) * 48];
    pad[0] = (char)depth;
    if (depth <= 0)
        fn(arg);
    else
        nest(depth - 1, fn, arg);
    return pad[0];
}

static void do_qsort(void *arg)
{
    int n = (int)(intptr_t)arg, v[64];
    for (int i = 0; i < n; i++)
        v[i] = (i * 7919) % n;
    qsort(v, (size_t)n, sizeof(v[0]), cmp_int);
}

static void free_nothing(void *p)
{
    (void)p;
}

static void walk_action(const void *node, VISIT which, int depth)
{
    (void)node;
    (void)depth;
    if (which == leaf || which == postorder)
        snap();
}

static void do_twalk(void *arg)
{
    void *root = NULL;
    static int keys[256];
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        keys[i] = (i * 37) % n;
        tsearch(&keys[i], &root, cmp_int);
    }
    twalk(root, walk_action);
    tdestroy(root, free_nothing);
}

static void sax_start(void *ctx, const xmlChar *name, const xmlChar **atts)
{
    (void)ctx;
    (void)name;
    (void)atts;
    snap();
}

static void do_xml(void *arg)
{
    char doc[4096];
    int depth = (int)(intptr_t)arg, o = 0;
    for (int i = 0; i < depth; i++)
        o += snprintf(doc + o, sizeof(doc) - (size_t)o, "<e%d a=\"%d\">", i % 3, i);
    for (int i = depth - 1; i >= 0; i--)
        o += snprintf(doc + o, sizeof(doc) - (size_t)o, "</e%d>", i % 3);
    xmlSAXHandler h;
    memset(&h, 0, sizeof(h));
    h.startElement = sax_start;
    xmlSAXUserParseMemory(&h, NULL, doc, o);
}

/* libxml2's allocator (xmlMemSetup): a sample at its allocations, the way
 * the eBPF program takes one at each malloc, from all over libxml2. */
static void *hook_malloc(size_t n)
{
    snap();
    return malloc(n);
}

static void *hook_realloc(void *p, size_t n)
{
    snap();
    return realloc(p, n);
}

static char *hook_strdup(const char *str)
{
    snap();
    return strdup(str);
}

static void do_xmldom(void *arg)
{
    char doc[8192];
    int n = (int)(intptr_t)arg, o = 0;
    o += snprintf(doc + o, sizeof(doc) - (size_t)o,
                  "<?xml version=\"1.0\"?><root xmlns:p=\"urn:x\">");
    for (int i = 0; i < n && o < (int)sizeof(doc) - 200; i++)
        o +=
            snprintf(doc + o, sizeof(doc) - (size_t)o,
                     "<p:item id=\"%d\" v=\"&amp;%d\"><!-- c --><x>t%d</x><![CDATA[d%d]]></p:item>",
                     i, i * 3, i, i);
    o += snprintf(doc + o, sizeof(doc) - (size_t)o, "</root>");
    xmlDocPtr d = xmlReadMemory(doc, o, "s.xml", NULL, n % 2 ? XML_PARSE_NOBLANKS : 0);
    if (!d)
        return;
    xmlXPathContextPtr x = xmlXPathNewContext(d);
    xmlXPathObjectPtr r =
        x ? xmlXPathEvalExpression((const xmlChar *)"//x[position() > 1]", x) : NULL;
    xmlChar *out = NULL;
    int len = 0;
    xmlDocDumpFormatMemory(d, &out, &len, 1);
    xmlFree(out);
    xmlXPathFreeObject(r);
    xmlXPathFreeContext(x);
    xmlFreeDoc(d);
}

static void on_signal(int sig)
{
    (void)sig;
    snap();
}

/* A signal frame (__restore_rt) on the stack: its rule is not simple. */
__attribute__((unused)) static void do_signal(void *arg)
{
    (void)arg;
    raise(SIGUSR1);
}

/* Deeper than the copy: the unwind ends where the copy does. */
static void do_deep(void *arg)
{
    nest((int)(intptr_t)arg, do_qsort, (void *)(intptr_t)8);
}

struct job {
    void (*fn)(void *);
    void *arg;
    int depth;
};

static void *thread_main(void *arg)
{
    struct job *j = arg;
    nest(j->depth, j->fn, j->arg);
    return NULL;
}

static void in_thread(struct job *j)
{
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, j) == 0)
        pthread_join(t, NULL);
}

unsigned unwind_samples_take(struct unwind_sample *s, unsigned max)
{
    g_s = s;
    g_n = 0;
    signal(SIGUSR1, on_signal);
    xmlMemSetup(free, hook_malloc, hook_realloc, hook_strdup);
    xmlInitParser();
    /* Each source gets its share of max, from several call depths. */
    unsigned share = max / 6 ? max / 6 : 1;
    for (int round = 0; g_n < max && round < 1000; round++) {
        int d = round % 9;
        g_every = 3;
        g_max = g_n + share / 40 + 1 < max ? g_n + share / 40 + 1 : max;
        nest(d, do_qsort, (void *)(intptr_t)(16 + round % 48));
        g_max = g_n + share / 40 + 1 < max ? g_n + share / 40 + 1 : max;
        nest(d, do_twalk, (void *)(intptr_t)(20 + (round * 13) % 230));
        g_max = g_n + share / 40 + 1 < max ? g_n + share / 40 + 1 : max;
        nest(d, do_xml, (void *)(intptr_t)(1 + round % 60));
        g_every = 7;
        g_max = g_n + share / 20 + 1 < max ? g_n + share / 20 + 1 : max;
        nest(d, do_xmldom, (void *)(intptr_t)(1 + (round * 7) % 40));
#ifndef HT_NO_SIGNAL_SAMPLES
        /* ThreadSanitizer's runtime (linked in, though this file is built
         * without it: HT_NO_SIGNAL_SAMPLES) defers a signal to its next
         * interceptor, where the handler's sample then runs inside fopen
         * or malloc, reported as a signal-unsafe call: no signal frames. */
        g_every = 1;
        g_max = g_n + 1 < max ? g_n + 1 : max;
        nest(d, do_signal, NULL);
#endif
        g_max = g_n + share / 40 + 1 < max ? g_n + share / 40 + 1 : max;
        do_deep((void *)(intptr_t)(20 + round % 40));
        struct job j = {do_xml, (void *)(intptr_t)(1 + round % 30), d};
        g_max = g_n + share / 40 + 1 < max ? g_n + share / 40 + 1 : max;
        in_thread(&j);
    }
    g_max = 0;
    return g_n;
}

/*
 * xmlleak: a program linked against Debian's libxml2 that leaks parsed
 * documents, built like Debian builds (-O2, no frame pointers), to check
 * that live stacks pass through code without frame pointers.
 * usage: xmlleak [DOCS [DEPTH]]   (default 200 documents, depth 0)
 *
 * leak_xml_docs parses DOCS small documents with xmlReadMemory and copies a
 * piece of each with xmlStrndup, and frees neither. The program counts what
 * it leaked itself: libxml2 allocates through the functions xmlMemSetup
 * installs, which here count the blocks allocated while leak_xml_docs runs
 * and are still live at the end (a pointer set; frees and reallocs update it).
 *
 * DEPTH > 0 calls leak_xml_docs under DEPTH frames of 1 KiB each (deep
 * below 8 KiB: stacks deeper than a DWARF stack copy).
 *
 * Protocol on stdout (app-sync.h's lines): {"pid":N,"ready":true}, wait
 * for a byte on stdin; run; print
 *   {"done":true,"pid":N,"docs":D,"leaked_blocks":B,"leaked_bytes":S}
 * then wait for another byte and exit 0. The end of stdin exits at once (a
 * test that failed leaves no program behind).
 */
#define _GNU_SOURCE
#include "app-sync.h"

#include <libxml/parser.h>
#include <libxml/xmlmemory.h>
#include <stdint.h>
#include <string.h>

/* Blocks allocated inside leak_xml_docs and not freed: an open-addressing
 * set of pointers with their sizes (deleted slots marked, never reused). */
#define SET_CAP (1u << 20)
#define TOMB ((void *)1)
static void *set_ptr[SET_CAP];
static size_t set_size[SET_CAP];
static size_t live_blocks, live_bytes;
static int counting;

static size_t slot_of(void *p)
{
    return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) & (SET_CAP - 1);
}

static void set_add(void *p, size_t n)
{
    size_t i = slot_of(p);
    while (set_ptr[i] && set_ptr[i] != TOMB)
        i = (i + 1) & (SET_CAP - 1);
    set_ptr[i] = p;
    set_size[i] = n;
    live_blocks++;
    live_bytes += n;
}

/* 1 when p was in the set (its size in *n). */
static int set_del(void *p, size_t *n)
{
    for (size_t i = slot_of(p); set_ptr[i]; i = (i + 1) & (SET_CAP - 1))
        if (set_ptr[i] == p) {
            set_ptr[i] = TOMB;
            live_blocks--;
            live_bytes -= set_size[i];
            *n = set_size[i];
            return 1;
        }
    return 0;
}

static void *count_malloc(size_t n)
{
    void *p = malloc(n);
    if (p && counting)
        set_add(p, n);
    return p;
}

static void count_free(void *p)
{
    size_t n;
    if (p)
        set_del(p, &n);
    free(p);
}

static void *count_realloc(void *old, size_t n)
{
    /* Out of the set before realloc frees it; back in if realloc fails. */
    size_t oldn = 0;
    int had = old && set_del(old, &oldn);
    void *p = realloc(old, n);
    if (!p && had)
        set_add(old, oldn);
    if (p && counting)
        set_add(p, n);
    return p;
}

static char *count_strdup(const char *s)
{
    char *p = strdup(s);
    if (p && counting)
        set_add(p, strlen(s) + 1);
    return p;
}

static const char doc_fmt[] = "<?xml version=\"1.0\"?><items n=\"%d\"><item id=\"a%d\">first "
                              "text</item><item id=\"b%d\">second <b>bold</b> text</item></items>";

xmlDocPtr volatile xml_sink;
xmlChar *volatile str_sink;

__attribute__((noinline)) void leak_xml_docs(int docs)
{
    char buf[256];
    for (int i = 0; i < docs; i++) {
        int n = snprintf(buf, sizeof(buf), doc_fmt, i, i, i);
        xmlDocPtr d = xmlReadMemory(buf, n, "leak.xml", NULL, XML_PARSE_NONET);
        if (!d) {
            fprintf(stderr, "xmlleak: document %d did not parse\n", i);
            exit(2);
        }
        xml_sink = d;
        str_sink = xmlStrndup((const xmlChar *)buf + 22, 40);
    }
}

/* A byte on stdin; its end (or an error) exits. */
static void wait_byte(void)
{
    char c;
    ssize_t r;
    while ((r = read(0, &c, 1)) < 0 && errno == EINTR) {
    }
    if (r != 1)
        exit(0);
}

/* depth frames of 1 KiB each, then leak_xml_docs. */
__attribute__((noinline)) int deep(int depth, int docs)
{
    volatile char pad[1024];
    pad[0] = (char)depth;
    if (depth <= 0) {
        leak_xml_docs(docs);
        return pad[0];
    }
    return deep(depth - 1, docs) + pad[0];
}

int main(int argc, char **argv)
{
    int docs = argc > 1 ? atoi(argv[1]) : 200;
    int depth = argc > 2 ? atoi(argv[2]) : 0;
    if (xmlMemSetup(count_free, count_malloc, count_realloc, count_strdup) != 0) {
        fprintf(stderr, "xmlleak: xmlMemSetup failed\n");
        return 2;
    }
    xmlInitParser();
    app_sync_say("{\"pid\":%d,\"ready\":true}", (int)getpid());
    wait_byte();
    counting = 1;
    if (depth > 0)
        deep(depth, docs);
    else
        leak_xml_docs(docs);
    counting = 0;
    app_sync_say(
        "{\"done\":true,\"pid\":%d,\"docs\":%d,\"leaked_blocks\":%zu,\"leaked_bytes\":%zu}",
        (int)getpid(), docs, live_blocks, live_bytes);
    wait_byte();
    return 0;
}

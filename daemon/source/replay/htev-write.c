/* .htev writer: the exact inverse of the parser for every field it reads. */
#include "htev-write.h"

#include "frame-match.h"
#include "stack-intern.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct out {
    char *p;
    size_t left;
    int full;
};

static void put(struct out *o, const char *fmt, ...)
{
    if (o->full)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p, o->left, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= o->left) {
        o->full = 1;
        return;
    }
    o->p += n;
    o->left -= (size_t)n;
}

static void put_json_string(struct out *o, const char *s)
{
    put(o, "\"");
    for (; *s && !o->full; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            put(o, "\\%c", c);
        else if (c < 0x20)
            put(o, "\\u%04x", c);
        else
            put(o, "%c", c);
    }
    put(o, "\"");
}

size_t htev_format(const struct ht_event *ev, const struct stack_intern *si, char *buf, size_t cap)
{
    struct out o = {buf, cap, 0};
    const char *kind = ht_event_kind_name(ev->kind);
    if (!kind)
        return 0;
    put(&o, "{\"t\":%llu,\"ev\":\"%s\"", (unsigned long long)ev->t, kind);
    if (ev->tid)
        put(&o, ",\"tid\":%u", ev->tid);
    switch (ev->kind) {
    case HT_EV_ALLOC:
    case HT_EV_REALLOC:
    case HT_EV_FREE:
        put(&o, ",\"heap\":\"0x%llx\",\"addr\":\"0x%llx\"", (unsigned long long)ev->heap,
            (unsigned long long)ev->addr);
        if (ev->kind == HT_EV_REALLOC)
            put(&o, ",\"old_addr\":\"0x%llx\",\"old_size\":%llu", (unsigned long long)ev->old_addr,
                (unsigned long long)ev->old_size);
        if (ev->kind != HT_EV_FREE)
            put(&o, ",\"size\":%llu", (unsigned long long)ev->size);
        break;
    case HT_EV_HEAP_DESTROY:
        put(&o, ",\"heap\":\"0x%llx\"", (unsigned long long)ev->heap);
        break;
    case HT_EV_COMMIT:
    case HT_EV_DECOMMIT:
    case HT_EV_RELEASE:
        put(&o, ",\"addr\":\"0x%llx\",\"size\":%llu", (unsigned long long)ev->addr,
            (unsigned long long)ev->size);
        break;
    case HT_EV_PRIVATE_BYTES:
        put(&o, ",\"bytes\":%llu", (unsigned long long)ev->size);
        break;
    case HT_EV_LOST:
        put(&o, ",\"count\":%llu", (unsigned long long)ev->size);
        break;
    case HT_EV_PROCESS:
        put(&o, ",\"pid\":%llu", (unsigned long long)ev->size);
        break;
    case HT_EV_EXIT:
        put(&o, ",\"code\":%lld", (long long)ev->size);
        break;
    case HT_EV_MODULE_LOAD: {
        const char *path = stack_intern_strget(si, (uint32_t)ev->heap);
        const char *bid = ev->old_size ? stack_intern_strget(si, (uint32_t)ev->old_size) : NULL;
        put(&o, ",\"base\":\"0x%llx\",\"size\":%llu,\"bias\":\"0x%llx\",\"path\":",
            (unsigned long long)ev->addr, (unsigned long long)ev->size,
            (unsigned long long)ev->old_addr);
        put_json_string(&o, path ? path : "");
        if (bid && bid[0]) {
            put(&o, ",\"build_id\":");
            put_json_string(&o, bid);
        }
        break;
    }
    case HT_EV_MODULE_UNLOAD:
        put(&o, ",\"base\":\"0x%llx\"", (unsigned long long)ev->addr);
        break;
    }
    if (ev->flags & HT_EVF_TRUNCATED)
        put(&o, ",\"truncated\":true");
    if (ev->stack &&
        (ev->kind == HT_EV_ALLOC || ev->kind == HT_EV_REALLOC || ev->kind == HT_EV_COMMIT)) {
        unsigned d;
        const uint64_t *f = stack_intern_frames(si, ev->stack, &d);
        char fb[FRAME_TEXT_MAX];
        put(&o, ",\"stack\":[");
        for (unsigned k = 0; k < d; k++) {
            if (k)
                put(&o, ",");
            put_json_string(&o, frame_text(si, f[k], fb, sizeof(fb)));
        }
        put(&o, "]");
    }
    put(&o, "}\n");
    return o.full ? 0 : cap - o.left;
}

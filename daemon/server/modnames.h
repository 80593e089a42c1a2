/*
 * Module names for address frames of a session whose source has no
 * symbolizer (a replayed stream: .htev, .htevb, raw ETW): the stream's module
 * events give each module's range, load bias and path, and a frame in one
 * reads "name!+0xOFF" (OFF = address - bias: the RVA of a PE image, the ELF
 * virtual address of a shared object), the form source.h gives a symbolizer's
 * frame without a symbol. Filled on the loop from the events the session
 * applies; read by the loop and the query workers: its own short mutex, never
 * held across anything slow. Memory charged to MEM_modules; at most
 * MODNAMES_MAX modules (past it a load is counted in drops).
 */
#ifndef MODNAMES_H
#define MODNAMES_H

#include "ht-event.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define MODNAMES_MAX 4096
#define MODNAMES_NAME 64 /* the path's last component, cut at a UTF-8 boundary */

struct mem_acct;
struct stack_intern;

struct modname {
    uint64_t start, end; /* modlist.h's element head */
    uint64_t bias;
    char name[MODNAMES_NAME];
};

struct modnames {
    uv_mutex_t mu;
    struct modname *v;
    size_t n, alloc;
    uint64_t drops;
    struct mem_acct *acct;
};

int modnames_init(struct modnames *m, struct mem_acct *acct);
void modnames_close(struct modnames *m);
/* The module events among evs (loop thread); path string ids are si's. */
void modnames_apply(struct modnames *m, const struct stack_intern *si, const struct ht_event *evs,
                    size_t n);
/* "name!+0xOFF" into buf, or NULL when no module holds addr. Any thread. */
const char *modnames_text(struct modnames *m, uint64_t addr, char *buf, size_t bufsz);

#endif

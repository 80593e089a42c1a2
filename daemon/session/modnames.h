/*
 * Module names for address frames of a session whose source has no
 * symbolizer (a replayed stream: .htev, .htevb, raw ETW): the stream's module
 * events give each module's range, load bias and path, and a frame in one
 * reads "name!+0xOFF" (OFF = address - bias: the RVA of a PE image, the ELF
 * virtual address of a shared object), the form source.h gives a symbolizer's
 * frame without a symbol. Filled on the loop from the events the session
 * applies; read by the loop and the query workers: its own short mutex, never
 * held across anything slow. Memory charged to MEM_modules; at most
 * MODNAMES_MAX modules (past it the oldest unloaded one makes room, else a
 * load is counted in drops).
 *
 * An unloaded module keeps its range until a later load overlaps it: names
 * are looked up when a query asks, after the stream's unloads, and the frames
 * recorded while it was loaded are still in it (Windows logs an Image Unload
 * for every module of a process as it exits, so a trace recorded to its end
 * has them all unloaded).
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
    uint64_t unloaded; /* 0 while loaded, else the order of its unload (1, 2, ...) */
    char name[MODNAMES_NAME];
};

struct modnames {
    uv_mutex_t mu;
    struct modname *v;
    size_t n, alloc;
    uint64_t drops;
    uint64_t unloads; /* the last unload's order */
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

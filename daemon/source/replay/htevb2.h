/*
 * HTEVB2 event records (the codec; framing and ids stay in htevb.c). An event
 * record is two bytes of flags, then the varints the flags ask for:
 *   b0 = 0x80 | kind (1..13) | 0x10 dt | 0x20 addr | 0x40 addr is a ref
 *   b1 = 0x01 old_addr | 0x02 old_addr is a ref | 0x04 heap | 0x08 size |
 *        0x10 old_size | 0x20 stack | 0x40 tid | 0x80 truncated stack
 * then in this order, each only when its bit is set: dt, old_addr, addr, heap,
 * size, old_size, stack, tid (LEB128, at most 10 bytes, no bit past 2^64).
 * A field whose bit is clear takes its predicted value (all start at 0):
 *   dt: the previous event's step; addr / old_addr / heap: those of the
 *   previous event of the same kind; stack: the stack that followed the
 *   previous one of the same kind the last time (a table of HTEVB2_SIZES slots
 *   by stack id), else that previous one; size: the last size seen with the
 *   same stack id plus the change from the one before it, when the size cache
 *   (HTEVB2_SIZES slots by stack id) holds it, else the previous size of the
 *   same kind; old_size: the size of the allocation its old_addr ref names,
 *   else the previous one of the same kind; tid: the previous event's.
 * An explicit addr / old_addr is a zigzag delta from its base (the previous
 * one of its kind, but a realloc's addr from its old_addr and an alloc's from
 * where the next fresh block goes: the end of the last alloc whose addr was a
 * delta, the end of the last alloc, the step between the last two of the
 * first kind again, or the last alloc with the same stack moved by its last
 * step, whichever was closest for the last such alloc), or with
 * its ref bit a distance into a ring of recent addresses: 0 names the latest
 * entry, HTEVB2_RING - 1 the oldest one a ring keeps. The addr of an alloc or
 * realloc refers to the free ring (allocators hand out what was just freed),
 * any other to the allocation ring (what is freed was allocated before).
 * After an event is decoded, an alloc or realloc pushes (addr, size) to the
 * allocation ring, a free pushes addr and a realloc old_addr to the free ring.
 * A ref past what its ring holds, a ref bit without its field, a bad kind, a
 * varint over 64 bits, a stack or tid over 32 bits are errors.
 * Writer and reader keep the same state (a few KiB of last values, two rings
 * of HTEVB2_RING entries, two tables of HTEVB2_SIZES entries: 704 KiB);
 * the writer alone has a bounded hash per ring from address to position to
 * find refs (1 MiB more).
 */
#ifndef HTEVB2_H
#define HTEVB2_H

#include "ht-event.h"

#include <stddef.h>
#include <stdint.h>

struct mem_acct;

#define HTEVB2_RING (1u << 14)  /* allocations a free can name by ref */
#define HTEVB2_SIZES (1u << 12) /* size cache slots, by stack id */
#define HTEVB2_HASH (2 * HTEVB2_RING)
#define HTEVB2_EVENT_MAX (2 + 8 * 10)

/* Errors of a record (negative), named by htevb2_strerror. */
enum {
    HTEVB2_EKIND = -1,
    HTEVB2_EREF = -2,    /* a ref to an empty ring slot */
    HTEVB2_EREFBIT = -3, /* a ref bit without its field */
    HTEVB2_EVARINT = -4, /* a varint over 10 bytes or 64 bits */
    HTEVB2_ERANGE = -5,  /* a stack id or tid over 32 bits */
};

struct htevb2_entry {
    uint64_t addr, size;
};
struct htevb2_slot {
    uint64_t addr, seq1; /* seq1: ring position + 1, 0 = empty */
};
struct htevb2_size {
    uint32_t stack;
    uint64_t size, step;  /* the last size with this stack, and its change */
    uint64_t addr, astep; /* the last alloc's addr with this stack, and its change */
};

struct htevb2_next {
    uint32_t prev, next;
};

struct htevb2_ring {
    struct htevb2_entry *e;   /* HTEVB2_RING */
    struct htevb2_slot *hash; /* HTEVB2_HASH, writer only */
    uint64_t pushed;          /* entries pushed since the start */
};

struct htevb2 {
    struct mem_acct *acct;
    int kind; /* mem-acct kind it is charged under */
    struct htevb2_ring allocs, frees;
    struct htevb2_size *sizes; /* HTEVB2_SIZES */
    struct htevb2_next *next;  /* HTEVB2_SIZES: the stack that followed a stack */
    size_t bytes;
    uint64_t t, dt; /* the last event's time and step */
    uint64_t addr[HT_EV_KIND_COUNT], old[HT_EV_KIND_COUNT], heap[HT_EV_KIND_COUNT];
    uint64_t size[HT_EV_KIND_COUNT], old_size[HT_EV_KIND_COUNT];
    uint32_t stack[HT_EV_KIND_COUNT], tid;
    /* The last alloc whose addr was a delta (not a ref): its addr and size,
     * the step from the one before, and which guess of where it would go was
     * closest (htevb2.c, fresh_guess). */
    uint64_t fresh, fresh_size, stride;
    int guess;
};

/* writer: 1 for the address hash. 0, or -1 when out of memory (or over acct's
 * budget). acct may be NULL. */
int htevb2_init(struct htevb2 *s, struct mem_acct *acct, int kind, int writer);
void htevb2_close(struct htevb2 *s);
/* Bytes of the event record at p (p[0] & 0x80): 0 if n bytes do not hold it
 * all, HTEVB2_EVARINT if a varint runs over 10 bytes. */
long htevb2_record_size(const unsigned char *p, size_t n);
/* Where nvar varints starting at p + off end within n bytes: the offset past
 * the last one, 0 when they do not end there, -1 when one runs past 10 bytes
 * (HTEVB1 and HTEVB2 records alike). */
long htevb_varints_end(const unsigned char *p, size_t n, size_t off, unsigned nvar);
/* Decode the record at p (n bytes available) into ev (stack and module ids
 * are the file's) and advance the state: bytes used, 0 if incomplete (the
 * state untouched), or an error (the state untouched). */
long htevb2_decode(struct htevb2 *s, const unsigned char *p, size_t n, struct ht_event *ev);
/* Encode ev (file ids) into buf (HTEVB2_EVENT_MAX bytes): its length. Times
 * never go backwards: an earlier t is written as the last one. */
size_t htevb2_encode(struct htevb2 *s, const struct ht_event *ev, unsigned char *buf);
const char *htevb2_strerror(long err);

#endif

/*
 * The binary twin of .htev: the same events, for fast replay. Little-endian:
 *   magic  "HTEVB1\n\0" (8 bytes)
 *   'S' u32 id, u16 len, bytes          a frame name (ids from 1, in order)
 *   'K' u32 id, u16 depth, u64 frames[] a stack (ids from 1, in order); a frame
 *                                       is an address, or HT_FRAME_SYM | name id
 *   'P' u64 t, u64 pid, u16 len, bytes  the process line
 *   'e' u8 kind, u8 fields, varint dt, varint addr, then one varint per bit set
 *       in fields: 1 heap, 2 old_addr, 4 size, 8 old_size, 16 stack, 32 tid;
 *       bit 64 marks a truncated stack, bit 128 a stack the source dropped
 *       (HT_EVF_STACK_DROPPED; HTEVB2 has no room for it: no stack). dt is the time since the previous
 *       event (times never go backwards in a stream written by the writer;
 *       a negative step is written as 0). Varints are LEB128 (7 bits a byte).
 *       module_load / module_unload: heap and old_size are the file's string
 *       ids of the path and build id ('S' records, defined before).
 * Definitions come before their first use. Readers map the file's ids to
 * their own interner, so files from different sessions replay anywhere.
 *
 * HTEVB2 (magic "HTEVB2\n\0", what the writer makes by default): the same
 * 'S', 'K' and 'P' records; events are records whose first byte has its top
 * bit set, coded against the events before them (htevb2.h), and 'e' is not
 * used. The reader takes both versions.
 */
#ifndef HTEVB_H
#define HTEVB_H

#include "ht-event.h"
#include "htevb2.h"
#include "id-map.h"

#include <stddef.h>
#include <stdint.h>

#define HTEVB_MAGIC "HTEVB1\n"
#define HTEVB2_MAGIC "HTEVB2\n"
#define HTEVB_MAGIC_LEN 8
#define HTEVB_MAX_IDS (1u << 24)

struct stack_intern;

typedef void (*htevb_event_fn)(void *arg, const struct ht_event *ev);
typedef void (*htevb_process_fn)(void *arg, const char *name, size_t len);

struct htevb_reader {
    struct stack_intern *si;
    struct id_map str_map, stack_map; /* file id -> our id */
    uint32_t nstr, nstack;
    unsigned char carry[16 + 8 * 256 + 4096]; /* the largest record */
    size_t carry_len;
    int magic_seen;
    int version; /* 1 or 2, from the magic */
    int broken;  /* after a malformed record nothing more can be framed */
    uint64_t last_t;
    struct htevb2 v2; /* HTEVB2's state, allocated at its magic */
    uint64_t records, events, malformed;
    /* HTEVB2 records refused, by htevb2.h error (index -err): bad kind, ref to
     * an empty slot, ref bit without its field, oversized varint, id over 32 bits. */
    uint64_t v2_errors[6];
    char err[128];
};

void htevb_reader_init(struct htevb_reader *r, struct stack_intern *si);
void htevb_reader_close(struct htevb_reader *r);
/* Feed bytes (the magic included). Events go to fn; the process name to pfn. */
void htevb_feed(struct htevb_reader *r, const unsigned char *buf, size_t n, htevb_event_fn fn,
                htevb_process_fn pfn, void *arg);

/* Writer: call htevb_write_event for each event; definitions are emitted the
 * first time a stack or name is used. out(arg, bytes, n) receives the stream. */
typedef void (*htevb_out_fn)(void *arg, const void *buf, size_t n);

struct htevb_writer {
    const struct stack_intern *si;
    htevb_out_fn out;
    void *arg;
    struct id_map str_file_id, stack_file_id; /* our id -> file id, 0 = not written yet */
    uint32_t next_str, next_stack;
    uint64_t last_t;
    int version;
    struct htevb2 v2;
};

/* HTEVB2. 0, or -1 when out of memory (nothing written; close it all the same). */
int htevb_writer_init(struct htevb_writer *w, const struct stack_intern *si, htevb_out_fn out,
                      void *arg);
/* version 1 (HTEVB1, 'e' records) or 2. */
int htevb_writer_init_version(struct htevb_writer *w, const struct stack_intern *si, int version,
                              htevb_out_fn out, void *arg);
void htevb_writer_close(struct htevb_writer *w);
void htevb_write_process(struct htevb_writer *w, uint64_t t, uint64_t pid, const char *name);
int htevb_write_event(struct htevb_writer *w, const struct ht_event *ev);

#endif

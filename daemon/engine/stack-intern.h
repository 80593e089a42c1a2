/* Stack interner: frame sequences -> u32 ids (0 = none) in append-only, chunked arenas. */
#ifndef STACK_INTERN_H
#define STACK_INTERN_H

#include "mem-acct.h"

#include <stddef.h>
#include <stdint.h>

/*
 * A frame is a u64: a raw instruction address, or, with HT_FRAME_SYM set, the
 * id of an interned "module!symbol" string in the low 32 bits (recorded
 * streams carry names; live sources carry addresses symbolized lazily).
 * Stacks are innermost first. Nothing is ever removed, so ids and frame
 * pointers stay valid for the interner's life. Memory is bounded by the caps
 * given to stack_intern_init: past them, lookups of new stacks return 0 and
 * count a drop.
 */
#define HT_FRAME_SYM (1ULL << 63)
#define HT_STACK_MAX_DEPTH 256
#define HT_STR_MAX_LEN 4096

struct si_chunks {
    void **chunks;
    uint32_t nchunks;
    uint32_t used; /* items used in the last chunk */
};

struct si_table {
    uint32_t *slots; /* id, 0 = empty */
    uint32_t mask;
};

struct stack_intern {
    /* Stacks: id -> (offset into frames, depth). Index 0 is reserved. */
    struct si_chunks recs;
    struct si_chunks frames;
    struct si_table stack_tab;
    uint32_t nstacks; /* including the reserved 0 */
    uint32_t max_stacks;
    /* Strings: id -> offset into the chars arena, NUL-terminated there. */
    struct si_chunks str_recs;
    struct si_chunks chars;
    struct si_table str_tab;
    uint32_t nstrs;
    uint32_t max_strs;
    uint64_t frame_bytes; /* memory held by the arenas, for status */
    uint64_t drops;       /* stacks not interned because a cap was reached */
    uint64_t str_drops;   /* names not interned because a cap was reached */
    uint64_t mem_drops;   /* stacks and names not interned: memory refused (see acct) */
    uint64_t long_names;  /* distinct names cut at max_name_len */
    uint64_t bad_utf8;    /* distinct names that were not UTF-8: kept with U+FFFD for each bad byte */
    uint32_t max_name_len;
    struct mem_acct *acct; /* growth charged here: stacks to kind_stacks, names to kind_strings */
    int kind_stacks, kind_strings;
    /* Optional: the text of an address frame ("module!symbol"), into buf or
     * a string of its own that outlives the call, or NULL to keep "0x...".
     * Set by whoever owns the interner (a session installs its live
     * source's symbolizer); frame_text uses it, so queries, cull lists and
     * exports see names. Loop thread only. */
    const char *(*resolve)(void *arg, uint64_t addr, char *buf, size_t bufsz);
    void *resolve_arg;
};

int stack_intern_init(struct stack_intern *si, uint32_t max_stacks, uint32_t max_strings);
/* The same with every growth charged to acct (may be NULL) under the two
 * kinds, and names cut at max_name_len bytes (0: HT_STR_MAX_LEN). */
int stack_intern_init_acct(struct stack_intern *si, uint32_t max_stacks, uint32_t max_strings,
                           uint32_t max_name_len, struct mem_acct *acct, int kind_stacks,
                           int kind_strings);
void stack_intern_close(struct stack_intern *si);

/* Id of the stack, interning it if new; 0 for depth 0, or when full (counted). */
uint32_t stack_intern_get(struct stack_intern *si, const uint64_t *frames, unsigned depth);
/* Frames of a stack (innermost first) or NULL with *depth 0 for id 0 / unknown. */
const uint64_t *stack_intern_frames(const struct stack_intern *si, uint32_t id, unsigned *depth);
/* Id of a string (1-based), interning it if new; 0 when full (counted).
 * Longer than max_name_len is cut (at a UTF-8 boundary) and counted once per
 * distinct name. A name that is not valid UTF-8 (a hostile or broken
 * stream) is kept with U+FFFD for each byte that is not, so every reply
 * stays valid JSON; counted once per distinct name. */
uint32_t stack_intern_str(struct stack_intern *si, const char *s, unsigned len);
/* The NUL-terminated string of an id, or NULL. */
const char *stack_intern_strget(const struct stack_intern *si, uint32_t id);
/* Approximate bytes of memory used. */
uint64_t stack_intern_memory(const struct stack_intern *si);
/*
 * A read-only copy for a view: the counts and its own copies of the
 * chunk-pointer arrays, sharing the chunks (append-only: what the owner adds
 * later lies past the copy's counts, and a growth of the owner's pointer
 * arrays or hash tables is not seen). stack_intern_frames, _strget and
 * frame_text work on it; interning through it is not allowed (no hash
 * tables). O(chunks). 0 or UV_ENOMEM; free with stack_intern_unpin.
 */
int stack_intern_pin(const struct stack_intern *si, struct stack_intern *view);
void stack_intern_unpin(struct stack_intern *view);

#endif

/* StackWalk stack keys in .etl files (Windows 8 and later "stack caching"): references
 * (0x1825 kernel, 0x1826 user) name a key whose frames come in a definition (0x1822 create,
 * 0x1823 delete when the key leaves the cache, 0x1824 rundown at the end), usually after
 * them. Read in one pass: a reference whose definition has not come waits in a bounded list
 * and is resolved by the first definition of its key that comes after it; at the end of the
 * file, one still waiting takes the last definition of its key before it, else it is
 * unresolved. A full list gives up its oldest reference (counted): memory stays bounded
 * whatever the number of references never defined. */
#ifndef ETL_KEYS_H
#define ETL_KEYS_H

#include "etl-read.h"

struct etl_keys;

/* A definition's frames (P bytes each, P = ptr_size, n of them) to a stack id of the
 * caller's interner (0: no stack), with HT_EVF_* flags (a truncated or dropped stack). */
typedef uint32_t (*etl_keys_stack_fn)(void *arg, const uint8_t *frames, uint32_t n,
                                      unsigned ptr_size, uint8_t *flags);

#define ETL_KEYS_WAITING (1u << 18) /* references waiting at once, by default */

struct etl_keys_limits {
    uint32_t max_waiting; /* references waiting at once (0: ETL_KEYS_WAITING) */
    uint32_t max_keys;    /* keys whose last definition is kept (0: 1 << 20) */
};

/* lim may be NULL (defaults). NULL on no memory. */
struct etl_keys *etl_keys_new(const struct etl_keys_limits *lim, etl_keys_stack_fn fn, void *arg);
void etl_keys_free(struct etl_keys *k);
/* A definition record (0x1822-0x1824): kept, and the references waiting for its key
 * resolved. Other records are ignored. */
void etl_keys_define(struct etl_keys *k, const struct etl_record *r);
/* A reference to key: its id (> 0) for etl_keys_take, resolved at once when its key's
 * current definition is a create (the key is in the cache), else waiting. 0 on no memory
 * (counted as dropped). */
uint64_t etl_keys_ref(struct etl_keys *k, uint64_t key);

enum { ETL_KEY_GONE = -1, ETL_KEY_WAIT = 0, ETL_KEY_READY = 1 };
/* The stack of reference id: ETL_KEY_READY (*stack and *flags set; the reference is done),
 * ETL_KEY_WAIT (its definition has not come), or ETL_KEY_GONE (dropped, unresolved at the
 * end, or already taken). */
int etl_keys_take(struct etl_keys *k, uint64_t id, uint32_t *stack, uint8_t *flags);
/* Reference id stops waiting (its event cannot wait longer): counted as dropped. */
void etl_keys_drop(struct etl_keys *k, uint64_t id);
/* End of the file: each reference still waiting takes the last definition of its key (one
 * that came before it), else it is unresolved (counted). */
void etl_keys_finish(struct etl_keys *k);

struct etl_keys_stats {
    uint64_t defs;          /* definition records */
    uint64_t defs_dropped;  /* of new keys past max_keys: not kept for later references */
    uint64_t short_records; /* definitions shorter than their key */
    uint64_t refs;          /* references given to etl_keys_ref */
    uint64_t waited;        /* of those, waited for a definition that came after them */
    uint64_t unresolved;    /* no definition of their key in the whole file */
    uint64_t dropped;       /* gave up waiting: the list was full, or their event left */
    uint64_t evicted;       /* resolved, then pushed out before their event took the stack */
    uint64_t max_waiting;   /* the most references waiting at once */
};
void etl_keys_stats(const struct etl_keys *k, struct etl_keys_stats *out);

#endif

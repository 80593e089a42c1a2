/*
 * A CFI row reduced to the common simple shape (CFA = rsp or rbp + offset,
 * return address and rbp saved at CFA + offset, or rbp unchanged), which an
 * unwinder applies with a few stack reads. Shared by the daemon's fast
 * unwinder (daemon/source/bpf/unwind-rules.c) and the in-process agent's
 * (agent/unwind-fast.c): built into both, in no library of its own, so the
 * agent links libdw but neither libuv nor cJSON.
 */
#ifndef HT_CFI_RULE_H
#define HT_CFI_RULE_H

#include <elfutils/libdw.h>
#include <stdint.h>

enum {
    RULE_EMPTY,  /* cache slot unused */
    RULE_SIMPLE, /* the fast unwinder can apply it */
    RULE_OTHER,  /* anything else: no module, no CFI, a DWARF expression, a signal frame... */
};

/* How the caller's rbp is found. */
enum { RBP_SAME, RBP_SAVED, RBP_UNDEFINED };

struct unwind_rule {
    uint64_t pc; /* the address looked up (a return address minus 1) */
    int32_t cfa_off;
    int32_t ra_off;   /* return address at CFA + ra_off (unless ra_undefined) */
    int32_t rbp_off;  /* RBP_SAVED: rbp at CFA + rbp_off */
    int32_t slot_max; /* highest CFA offset of any saved register (libdwfl reads them all) */
    uint8_t kind;
    uint8_t cfa_rbp;      /* CFA from rbp, else from rsp */
    uint8_t ra_undefined; /* the outermost frame (_start, clone): the stack ends */
    uint8_t rbp_how;
    uint8_t has_slots;
};

/* The cache's size in unwind-rules.h (1 MiB) counts on it. */
_Static_assert(sizeof(struct unwind_rule) == 32, "a rule is 32 bytes");

/* out (zeroed by the caller, kind RULE_OTHER) made RULE_SIMPLE when the
 * row f has the simple shape. */
void ht_cfi_rule(Dwarf_Frame *f, struct unwind_rule *out);

#endif

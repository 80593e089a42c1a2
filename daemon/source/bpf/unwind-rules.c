/* The rule cache of the fast unwinder: CFI rows of libdw reduced to a few offsets. */
#include "unwind-rules.h"

#include "ht-alloc.h"

#include <elfutils/libdw.h>
#include <stdlib.h>
#include <string.h>

void unwind_rules_init(struct unwind_rules *r)
{
    memset(r, 0, sizeof(*r));
}

void unwind_rules_close(struct unwind_rules *r)
{
    ht_free(r->t);
    r->t = NULL;
}

void unwind_rules_clear(struct unwind_rules *r)
{
    if (r->t)
        memset(r->t, 0, (size_t)UNWIND_RULES_SLOTS * sizeof(*r->t));
    r->st.entries = 0;
}

/* Tries a CFI the way libdwfl does (libdwfl/frame_unwind.c: .eh_frame first,
 * then .debug_frame): 1 when the CFI has a row for pc, whatever its shape. */
static int rule_from_cfi(Dwarf_CFI *cfi, Dwarf_Addr bias, uint64_t pc, struct unwind_rule *out)
{
    Dwarf_Frame *f;
    if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &f) != 0)
        return 0;
    ht_cfi_rule(f, out);
    free(f); /* malloc'd by libdw (libdw.h dwarf_cfi_addrframe) */
    return 1;
}

/* The rule at pc. RULE_OTHER when libdwfl would not use CFI there: no
 * module, no row (it then walks frame pointers, ebl_unwind). */
static void rule_read(Dwfl *dwfl, uint64_t pc, struct unwind_rule *out)
{
    memset(out, 0, sizeof(*out));
    out->pc = pc;
    out->kind = RULE_OTHER;
    Dwfl_Module *mod = dwfl_addrmodule(dwfl, pc);
    if (!mod)
        return;
    Dwarf_Addr bias;
    Dwarf_CFI *cfi = dwfl_module_eh_cfi(mod, &bias);
    if (rule_from_cfi(cfi, bias, pc, out))
        return;
    cfi = dwfl_module_dwarf_cfi(mod, &bias);
    rule_from_cfi(cfi, bias, pc, out);
}

/* First slot of pc's set of UNWIND_RULES_WAYS. The murmur3 finalizer
 * (fmix64, public domain) mixes every bit of the address: a plain
 * multiplicative hash sent two hot return addresses of libc, a fixed
 * distance apart, to one slot in every run. */
static uint32_t set_of(uint64_t pc)
{
    pc ^= pc >> 33;
    pc *= 0xff51afd7ed558ccdull;
    pc ^= pc >> 33;
    pc *= 0xc4ceb9fe1a85ec53ull;
    pc ^= pc >> 33;
    return (uint32_t)pc & (UNWIND_RULES_SLOTS - UNWIND_RULES_WAYS);
}

const struct unwind_rule *unwind_rules_get(struct unwind_rules *r, Dwfl *dwfl, uint64_t pc)
{
    if (!r->t) {
        r->t = ht_calloc(UNWIND_RULES_SLOTS, sizeof(*r->t));
        if (!r->t)
            return NULL;
    }
    struct unwind_rule *set = &r->t[set_of(pc)];
    for (unsigned w = 0; w < UNWIND_RULES_WAYS; w++)
        if (set[w].kind != RULE_EMPTY && set[w].pc == pc) {
            r->st.hits++;
            return &set[w];
        }
    r->st.misses++;
    /* The set is kept newest first: the oldest rule makes room (counted
     * when the set was full). */
    if (set[UNWIND_RULES_WAYS - 1].kind != RULE_EMPTY)
        r->st.evicted++;
    else
        r->st.entries++;
    memmove(&set[1], &set[0], (UNWIND_RULES_WAYS - 1) * sizeof(*set));
    rule_read(dwfl, pc, &set[0]);
    return &set[0];
}

/* The rule cache of the fast unwinder: CFI rows of libdw reduced to a few offsets. */
#include "unwind-rules.h"

#include "ht-alloc.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <stdlib.h>
#include <string.h>

/* DWARF register numbers of x86-64 (System V psABI, table "DWARF Register
 * Number Mapping"): 6 rbp, 7 rsp, 16 the return address. */
#define DW_RBP 6
#define DW_RSP 7
#define DW_RA 16
/* The registers libdwfl unwinds on x86-64 (backends/x86_64_init.c frame_nregs). */
#define DW_NREGS 17

/* The cache's size in the header (1 MiB) counts on it. */
_Static_assert(sizeof(struct unwind_rule) == 32, "a rule is 32 bytes");

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

/* A register's rule as libdw gives it (libdw.h dwarf_frame_register):
 * no ops and ops == NULL is "same value", no ops and ops == ops_mem
 * "undefined", DW_OP_call_frame_cfa [DW_OP_plus_uconst N] the location
 * CFA + N ("offset(N)"), the same followed by DW_OP_stack_value the value
 * CFA + N ("val_offset(N)"). */
enum { REG_SAME, REG_UNDEFINED, REG_AT_CFA, REG_CFA_VALUE, REG_OTHER };

static int reg_rule(Dwarf_Frame *f, int regno, int64_t *off)
{
    Dwarf_Op mem[3], *ops;
    size_t n;
    if (dwarf_frame_register(f, regno, mem, &ops, &n) != 0)
        return REG_OTHER;
    if (n == 0)
        return ops == NULL ? REG_SAME : ops == mem ? REG_UNDEFINED : REG_OTHER;
    if (ops[0].atom != DW_OP_call_frame_cfa)
        return REG_OTHER;
    size_t i = 1;
    *off = 0;
    if (i < n && ops[i].atom == DW_OP_plus_uconst)
        *off = (int64_t)ops[i++].number; /* a negative offset wraps (libdw stores it signed) */
    if (i == n)
        return REG_AT_CFA;
    if (i + 1 == n && ops[i].atom == DW_OP_stack_value)
        return REG_CFA_VALUE;
    return REG_OTHER;
}

static int fits32(int64_t v)
{
    return v >= INT32_MIN && v <= INT32_MAX;
}

/* The CFA: DW_OP_bregx reg offset for a register + offset rule (libdw.h
 * dwarf_frame_cfa; libdw builds it so for DW_CFA_def_cfa*). */
static int cfa_rule(Dwarf_Frame *f, struct unwind_rule *out)
{
    Dwarf_Op *ops;
    size_t n;
    if (dwarf_frame_cfa(f, &ops, &n) != 0 || n != 1 || ops[0].atom != DW_OP_bregx)
        return -1;
    if ((ops[0].number != DW_RSP && ops[0].number != DW_RBP) || !fits32((int64_t)ops[0].number2))
        return -1;
    out->cfa_rbp = ops[0].number == DW_RBP;
    out->cfa_off = (int32_t)(int64_t)ops[0].number2;
    return 0;
}

/* Every register's rule: of a shape the fast unwinder applies exactly as
 * libdwfl's handle_cfi would, or RULE_OTHER. */
static int regs_rule(Dwarf_Frame *f, struct unwind_rule *out)
{
    for (int regno = 0; regno < DW_NREGS; regno++) {
        int64_t off = 0;
        int how = reg_rule(f, regno, &off);
        if (how == REG_OTHER || ((how == REG_AT_CFA || how == REG_CFA_VALUE) && !fits32(off)))
            return -1;
        if (regno == DW_RSP) {
            /* The caller's rsp is the CFA (the x86-64 ABI CIE's val_offset(0)). */
            if (how != REG_CFA_VALUE || off != 0)
                return -1;
            continue;
        }
        if (how == REG_CFA_VALUE)
            return -1;
        if (how == REG_AT_CFA) {
            if (!out->has_slots || off > out->slot_max)
                out->slot_max = (int32_t)off;
            out->has_slots = 1;
        }
        if (regno == DW_RA) {
            if (how == REG_SAME)
                return -1;
            out->ra_undefined = how == REG_UNDEFINED;
            out->ra_off = (int32_t)off;
        } else if (regno == DW_RBP) {
            out->rbp_how = how == REG_SAME     ? RBP_SAME
                           : how == REG_AT_CFA ? RBP_SAVED
                                               : RBP_UNDEFINED;
            out->rbp_off = (int32_t)off;
        }
    }
    return 0;
}

static void rule_from_frame(Dwarf_Frame *f, struct unwind_rule *out)
{
    Dwarf_Addr start, end;
    bool signal = false;
    int ra = dwarf_frame_info(f, &start, &end, &signal);
    if (ra != DW_RA || signal || cfa_rule(f, out) || regs_rule(f, out))
        return;
    out->kind = RULE_SIMPLE;
}

/* Tries a CFI the way libdwfl does (libdwfl/frame_unwind.c: .eh_frame first,
 * then .debug_frame): 1 when the CFI has a row for pc, whatever its shape. */
static int rule_from_cfi(Dwarf_CFI *cfi, Dwarf_Addr bias, uint64_t pc, struct unwind_rule *out)
{
    Dwarf_Frame *f;
    if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &f) != 0)
        return 0;
    rule_from_frame(f, out);
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

/* CFI rows of libdw reduced to a few offsets (ht-cfi-rule.h). */
#include "ht-cfi-rule.h"

#include <dwarf.h>
#include <stdbool.h>

/* DWARF register numbers of x86-64 (System V psABI, table "DWARF Register
 * Number Mapping"): 6 rbp, 7 rsp, 16 the return address. */
#define DW_RBP 6
#define DW_RSP 7
#define DW_RA 16
/* The registers libdwfl unwinds on x86-64 (backends/x86_64_init.c frame_nregs). */
#define DW_NREGS 17

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

void ht_cfi_rule(Dwarf_Frame *f, struct unwind_rule *out)
{
    Dwarf_Addr start, end;
    bool signal = false;
    int ra = dwarf_frame_info(f, &start, &end, &signal);
    if (ra != DW_RA || signal || cfa_rule(f, out) || regs_rule(f, out))
        return;
    out->kind = RULE_SIMPLE;
}

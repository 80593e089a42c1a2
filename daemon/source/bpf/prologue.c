/* The probe site of a function: a walk of its straight-line prologue with capstone. */
#include "prologue.h"

#include "ht-alloc.h"

#include <capstone/capstone.h>
#include <stdio.h>
#include <string.h>

/* General-purpose registers by ModRM number (rax 0 .. rdi 7, r8 8 .. r15
 * 15), each with its narrower names: a write to any of them changes it. */
static const x86_reg gprs[16][5] = {
    {X86_REG_RAX, X86_REG_EAX, X86_REG_AX, X86_REG_AL, X86_REG_AH},
    {X86_REG_RCX, X86_REG_ECX, X86_REG_CX, X86_REG_CL, X86_REG_CH},
    {X86_REG_RDX, X86_REG_EDX, X86_REG_DX, X86_REG_DL, X86_REG_DH},
    {X86_REG_RBX, X86_REG_EBX, X86_REG_BX, X86_REG_BL, X86_REG_BH},
    {X86_REG_RSP, X86_REG_ESP, X86_REG_SP, X86_REG_SPL},
    {X86_REG_RBP, X86_REG_EBP, X86_REG_BP, X86_REG_BPL},
    {X86_REG_RSI, X86_REG_ESI, X86_REG_SI, X86_REG_SIL},
    {X86_REG_RDI, X86_REG_EDI, X86_REG_DI, X86_REG_DIL},
    {X86_REG_R8, X86_REG_R8D, X86_REG_R8W, X86_REG_R8B},
    {X86_REG_R9, X86_REG_R9D, X86_REG_R9W, X86_REG_R9B},
    {X86_REG_R10, X86_REG_R10D, X86_REG_R10W, X86_REG_R10B},
    {X86_REG_R11, X86_REG_R11D, X86_REG_R11W, X86_REG_R11B},
    {X86_REG_R12, X86_REG_R12D, X86_REG_R12W, X86_REG_R12B},
    {X86_REG_R13, X86_REG_R13D, X86_REG_R13W, X86_REG_R13B},
    {X86_REG_R14, X86_REG_R14D, X86_REG_R14W, X86_REG_R14B},
    {X86_REG_R15, X86_REG_R15D, X86_REG_R15W, X86_REG_R15B},
};

/* The System V AMD64 ABI's integer argument registers, in order. */
static const unsigned arg_regs[6] = {7, 6, 2, 1, 8, 9};

static int gpr_of(unsigned r)
{
    for (int g = 0; g < 16; g++)
        for (int k = 0; k < 5 && gprs[g][k]; k++)
            if (gprs[g][k] == r)
                return g;
    return -1;
}

/* rsp (and with it the return address the return probe replaces), the
 * callee-saved registers (rbx rbp r12-r15: rbp starts the frame-pointer
 * walk, all of them the DWARF unwind) and the arguments the function takes
 * must reach the probe as they were at the call. */
static int reg_kept(int g, unsigned nargs)
{
    if (g == 4 || g == 3 || g == 5 || g >= 12)
        return 1;
    for (unsigned i = 0; i < nargs && i < 6; i++)
        if (arg_regs[i] == (unsigned)g)
            return 1;
    return 0;
}

/* Facts from arch/x86/kernel/uprobes.c (Linux 3.x to 6.18):
 * push_setup_xol_ops emulates `push %reg`, one byte (50-57) or with the
 * single REX prefix 0x41 (r8-r15); branch_setup_xol_ops emulates jmp rel8
 * (eb), jmp rel32 (e9), call rel32 (e8), jcc rel8 (70-7f) and rel32 (0f
 * 80-8f), refusing those with a 0x66 prefix, and 0x90 after any prefixes as
 * a nop. Taken here without prefixes, and the nop only bare or after 66 or
 * f3 (41 90 is xchg %eax,%r8d). Linux 6.16 also emulates the multi-byte
 * nops of x86_nops[]; not counted on, so the site is emulated on any
 * kernel. */
int prologue_emulated(const uint8_t *c, size_t n, unsigned *len)
{
    if (n < 1)
        return 0;
    if (c[0] >= 0x50 && c[0] <= 0x57) {
        *len = 1;
        return 1;
    }
    if (c[0] == 0x41 && n >= 2 && c[1] >= 0x50 && c[1] <= 0x57) {
        *len = 2;
        return 1;
    }
    unsigned p = 0;
    while (p < n && p < 4 && (c[p] == 0x66 || c[p] == 0xf3))
        p++;
    if (p < n && c[p] == 0x90) {
        *len = p + 1;
        return 1;
    }
    unsigned l = 0;
    if ((c[0] >= 0x70 && c[0] <= 0x7f) || c[0] == 0xeb)
        l = 2;
    else if (c[0] == 0xe9 || c[0] == 0xe8)
        l = 5;
    else if (c[0] == 0x0f && n >= 2 && c[1] >= 0x80 && c[1] <= 0x8f)
        l = 6;
    if (l == 0 || n < l)
        return 0;
    *len = l;
    return 1;
}

static int is_branch(const cs_insn *in)
{
    const cs_detail *d = in->detail;
    for (uint8_t i = 0; i < d->groups_count; i++)
        switch (d->groups[i]) {
        case CS_GRP_JUMP:
        case CS_GRP_CALL:
        case CS_GRP_RET:
        case CS_GRP_INT:
        case CS_GRP_IRET:
        case CS_GRP_PRIVILEGE:
        case CS_GRP_BRANCH_RELATIVE:
            return 1;
        }
    return in->id == X86_INS_SYSCALL || in->id == X86_INS_SYSENTER;
}

/* 0 when the instruction may run before the probe: no branch, no write to
 * a kept register or to memory (conservative: a store could reach the
 * stack), no lock. Otherwise 1 and why in s. */
static int insn_stops(csh h, const cs_insn *in, unsigned off, unsigned nargs,
                      struct prologue_site *s)
{
    const char *m = in->mnemonic;
    if (is_branch(in)) {
        snprintf(s->why, sizeof(s->why), "%s at +%u, a branch the kernel single-steps", m, off);
        return 1;
    }
    cs_regs rd, wr;
    uint8_t nrd = 0, nwr = 0;
    if (cs_regs_access(h, in, rd, &nrd, wr, &nwr) != CS_ERR_OK) {
        snprintf(s->why, sizeof(s->why), "%s at +%u, registers unknown", m, off);
        return 1;
    }
    for (uint8_t i = 0; i < nwr; i++) {
        int g = gpr_of(wr[i]);
        if (wr[i] == X86_REG_EFLAGS || (g >= 0 && !reg_kept(g, nargs)))
            continue;
        snprintf(s->why, sizeof(s->why), "%s at +%u writes %s", m, off, cs_reg_name(h, wr[i]));
        return 1;
    }
    const cs_x86 *x = &in->detail->x86;
    for (uint8_t i = 0; i < x->op_count; i++)
        if (x->operands[i].type == X86_OP_MEM && (x->operands[i].access & CS_AC_WRITE)) {
            snprintf(s->why, sizeof(s->why), "%s at +%u writes memory", m, off);
            return 1;
        }
    if (x->prefix[0] == X86_PREFIX_LOCK) {
        snprintf(s->why, sizeof(s->why), "%s at +%u is locked", m, off);
        return 1;
    }
    return 0;
}

/* Walk from the entry with h to the first emulated instruction. */
static void site_walk(csh h, cs_insn *in, const uint8_t *code, size_t n, unsigned nargs,
                      struct prologue_site *s)
{
    const uint8_t *p = code;
    size_t left = n;
    uint64_t addr = 0;
    for (;;) {
        unsigned off = (unsigned)addr, len;
        if (off < n && prologue_emulated(code + off, n - off, &len)) {
            s->off = off;
            s->emulated = 1;
            return;
        }
        if (!cs_disasm_iter(h, &p, &left, &addr, in)) {
            if (n - off < 16)
                snprintf(s->why, sizeof(s->why), "no emulated instruction in the first %u bytes",
                         off);
            else
                snprintf(s->why, sizeof(s->why), "not decoded at +%u", off);
            return;
        }
        if (insn_stops(h, in, off, nargs, s))
            return;
    }
}

void prologue_site_find(const uint8_t *code, size_t n, unsigned nargs, struct prologue_site *s)
{
    memset(s, 0, sizeof(*s));
    if (n > PROLOGUE_SCAN)
        n = PROLOGUE_SCAN;
    /* capstone allocates through our hooks too (one setting per process,
     * taken before cs_open). */
    cs_opt_mem mem = {ht_malloc, ht_calloc, ht_realloc, ht_free, vsnprintf};
    cs_option(0, CS_OPT_MEM, (size_t)&mem);
    csh h;
    if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK) {
        unsigned len;
        s->emulated = prologue_emulated(code, n, &len);
        snprintf(s->why, sizeof(s->why), "the decoder (capstone) did not start");
        return;
    }
    cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
    cs_insn *in = cs_malloc(h);
    if (in)
        site_walk(h, in, code, n, nargs, s);
    else
        snprintf(s->why, sizeof(s->why), "out of memory");
    if (s->emulated)
        s->why[0] = 0;
    cs_free(in, 1);
    cs_close(&h);
}

unsigned prologue_probe_offset(const uint8_t *code, size_t n)
{
    struct prologue_site s;
    prologue_site_find(code, n, 6, &s);
    return s.off;
}

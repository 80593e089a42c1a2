/* A tiny x86-64 prologue decoder: the first emulated instruction a probe can sit on. */
#include "prologue.h"

/* Registers are numbered as in ModRM (rax 0 .. rdi 7, r8 8 .. r15 15). The
 * arguments of the System V ABI (rdi rsi rdx rcx r8 r9) and rsp must keep
 * their entry values up to the probe. */
static int reg_kept(unsigned r)
{
    return r == 4 || r == 7 || r == 6 || r == 2 || r == 1 || r == 8 || r == 9;
}

int prologue_emulated(const uint8_t *c, size_t n, unsigned *len)
{
    if (n < 1)
        return 0;
    /* The kernel emulates these (arch/x86/kernel/uprobes.c,
     * branch_setup_xol_ops and push_setup_xol_ops). */
    if (c[0] >= 0x50 && c[0] <= 0x57) { /* push %reg */
        *len = 1;
        return 1;
    }
    if (c[0] == 0x41 && n >= 2 && c[1] >= 0x50 && c[1] <= 0x57) { /* push %r8..%r15 */
        *len = 2;
        return 1;
    }
    if (c[0] == 0x90) { /* nop */
        *len = 1;
        return 1;
    }
    if (c[0] >= 0x70 && c[0] <= 0x7f && n >= 2) { /* jcc rel8 */
        *len = 2;
        return 1;
    }
    if (c[0] == 0xeb && n >= 2) { /* jmp rel8 */
        *len = 2;
        return 1;
    }
    if ((c[0] == 0xe9 || c[0] == 0xe8) && n >= 5) { /* jmp/call rel32 */
        *len = 5;
        return 1;
    }
    if (c[0] == 0x0f && n >= 6 && c[1] >= 0x80 && c[1] <= 0x8f) { /* jcc rel32 */
        *len = 6;
        return 1;
    }
    return 0;
}

/* An instruction that may run before the probe: no branch, and no write to
 * rsp or an argument register. Only shapes seen in allocator prologues
 * (glibc 2.36, jemalloc, tcmalloc); anything else stops the scan. */
static unsigned skippable(const uint8_t *c, size_t n)
{
    /* endbr64 */
    if (n >= 4 && c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa)
        return 4;
    unsigned rex = 0, i = 0;
    if (n >= 1 && (c[0] & 0xf0) == 0x40) {
        rex = c[0];
        i = 1;
    }
    if (i + 2 > n)
        return 0;
    uint8_t op = c[i], modrm = c[i + 1];
    unsigned mod = modrm >> 6;
    /* test r, r (85 /r) and cmp r, r (39 /r, 3b /r), register forms: flags only. */
    if ((op == 0x85 || op == 0x39 || op == 0x3b) && mod == 3)
        return i + 2;
    /* cmpb $imm8, disp32(%rip) (80 /7, modrm 00 111 101): glibc's
     * `cmpb $0,__malloc_initialized(%rip)`. */
    if (op == 0x80 && !rex && modrm == 0x3d && n >= 7)
        return 7;
    /* cmpl $imm8, disp32(%rip) (83 /7). */
    if (op == 0x83 && modrm == 0x3d && i + 7 <= n)
        return i + 7;
    /* mov r64, r64 (89 /r) into a register that is not kept. */
    if (op == 0x89 && mod == 3) {
        unsigned dst = (modrm & 7) | ((rex & 1) << 3);
        return reg_kept(dst) ? 0 : i + 2;
    }
    return 0;
}

unsigned prologue_probe_offset(const uint8_t *code, size_t n)
{
    if (n > PROLOGUE_SCAN)
        n = PROLOGUE_SCAN;
    unsigned off = 0;
    while (off < n) {
        unsigned len;
        if (prologue_emulated(code + off, n - off, &len))
            return off;
        len = skippable(code + off, n - off);
        if (len == 0)
            return 0;
        off += len;
    }
    return 0;
}

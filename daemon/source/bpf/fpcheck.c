/* Frame pointers of a module, from its CFI (libdw). */
#include "fpcheck.h"

#include "ht-error.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>

/* Functions sampled per module: enough to tell, cheap for libc's ~3,000. */
#define SAMPLES 256
/* Fewer read than this: cannot tell (treated as no frame pointers). */
#define MIN_SAMPLED 8
/* DWARF register numbers of rbp and rsp (System V psABI x86-64, figure 3.36). */
#define REG_RBP 6

/* The symbol table to sample: .symtab when the file has one, else .dynsym
 * (stripped Debian binaries keep only the dynamic one). */
static Elf_Scn *symtab_find(Elf *elf)
{
    Elf_Scn *scn = NULL, *dyn = NULL;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh))
            continue;
        if (sh.sh_type == SHT_SYMTAB)
            return scn;
        if (sh.sh_type == SHT_DYNSYM)
            dyn = scn;
    }
    return dyn;
}

/* The CFA rule at pc: 1 when rbp-based, 0 when based on another register,
 * -1 when the CFI does not cover pc or the rule is an expression. */
static int cfa_on_rbp(Dwarf_CFI *cfi, Dwarf_Addr pc)
{
    Dwarf_Frame *frame = NULL;
    Dwarf_Op *ops = NULL;
    size_t nops = 0;
    int r = -1;
    if (dwarf_cfi_addrframe(cfi, pc, &frame) != 0)
        return -1;
    /* A register + offset rule reads as one DW_OP_bregx (libdw.h, dwarf_frame_cfa). */
    if (dwarf_frame_cfa(frame, &ops, &nops) == 0 && nops == 1 && ops[0].atom == DW_OP_bregx)
        r = ops[0].number == REG_RBP;
    free(frame);
    return r;
}

static void sample(Elf_Scn *scn, Dwarf_CFI *cfi, struct fpcheck *out)
{
    GElf_Shdr sh;
    Elf_Data *data = elf_getdata(scn, NULL);
    if (!gelf_getshdr(scn, &sh) || !data || sh.sh_entsize == 0)
        return;
    size_t n = sh.sh_size / sh.sh_entsize;
    size_t stride = n / (SAMPLES * 4) + 1; /* about a quarter of symbols are functions */
    for (size_t i = 0; i < n && out->sampled < SAMPLES; i += stride) {
        GElf_Sym sym;
        if (!gelf_getsym(data, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
            sym.st_shndx == SHN_UNDEF)
            continue;
        out->functions++;
        if (sym.st_size < 16)
            continue;
        /* Mid-function: past the prologue, before the epilogue. */
        int r = cfi ? cfa_on_rbp(cfi, sym.st_value + sym.st_size / 2) : -1;
        if (r < 0)
            continue;
        out->sampled++;
        out->rbp += (unsigned)r;
    }
}

int fpcheck_fd(int fd, struct fpcheck *out)
{
    memset(out, 0, sizeof(*out));
    elf_version(EV_CURRENT);
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf)
        return HT_EBADARG;
    int rc = HT_EBADARG;
    Dwarf_CFI *cfi = elf_kind(elf) == ELF_K_ELF ? dwarf_getcfi_elf(elf) : NULL;
    Elf_Scn *scn = cfi ? symtab_find(elf) : NULL;
    if (scn) {
        sample(scn, cfi, out);
        rc = 0;
    }
    if (cfi)
        dwarf_cfi_end(cfi);
    elf_end(elf);
    return rc;
}

int fpcheck_has_fp(const struct fpcheck *f)
{
    /* Built with frame pointers, nearly every function is rbp-based in its
     * middle; without, nearly none (only those that realign the stack or
     * use alloca). Half is far from both. */
    return f->sampled >= MIN_SAMPLED && 2 * f->rbp >= f->sampled;
}

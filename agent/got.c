/*
 * GOT patching for an attached agent (attach.c): every loaded module's
 * relocated pointers to the allocator's entry points (JUMP_SLOT: PLT
 * calls; GLOB_DAT: -fno-plt calls and address-taken uses; R_X86_64_64: a
 * function pointer in data) are pointed at our hooks; dlopen's at a
 * wrapper that patches the modules it loads. Relocation types and the
 * dynamic section: the System V x86-64 psABI, "Relocation Types"; elf(5).
 *
 * A slot is rewritten only while it holds the program's own definition
 * (the global scope's, which is what the hooks call) or, bound lazily, a
 * pointer into its own module's PLT: a module bound to some other
 * definition (RTLD_DEEPBIND, a local copy) keeps it, and so its blocks
 * never reach an allocator that did not make them.
 */
#define _GNU_SOURCE
#include "agent-int.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <unistd.h>

#define HOOK_MAX 48

struct hook {
    const char *name;
    uintptr_t real, mine;
};

static struct hook hooks[HOOK_MAX];
static unsigned nhooks;
static uintptr_t self_base;
static int patch_lock;
static void *(*real_dlopen)(const char *, int);

static void *attach_dlopen(const char *file, int mode);

/* Every name the agent defines (hooks.c, hooks-cxx.c), dlopen last. */
static const char *const hook_names[] = {"malloc",
                                         "free",
                                         "calloc",
                                         "realloc",
                                         "reallocarray",
                                         "posix_memalign",
                                         "aligned_alloc",
                                         "memalign",
                                         "valloc",
                                         "pvalloc",
                                         "mmap",
                                         "mmap64",
                                         "munmap",
                                         "mremap",
                                         "sbrk",
                                         "brk",
                                         "dlclose",
                                         "_Znwm",
                                         "_Znam",
                                         "_ZnwmSt11align_val_t",
                                         "_ZnamSt11align_val_t",
                                         "_ZnwmRKSt9nothrow_t",
                                         "_ZnamRKSt9nothrow_t",
                                         "_ZnwmSt11align_val_tRKSt9nothrow_t",
                                         "_ZnamSt11align_val_tRKSt9nothrow_t",
                                         "_ZdlPv",
                                         "_ZdaPv",
                                         "_ZdlPvm",
                                         "_ZdaPvm",
                                         "_ZdlPvSt11align_val_t",
                                         "_ZdaPvSt11align_val_t",
                                         "_ZdlPvmSt11align_val_t",
                                         "_ZdaPvmSt11align_val_t",
                                         "_ZdlPvRKSt9nothrow_t",
                                         "_ZdaPvRKSt9nothrow_t",
                                         "_ZdlPvSt11align_val_tRKSt9nothrow_t",
                                         "_ZdaPvSt11align_val_tRKSt9nothrow_t",
                                         "dlopen"};

/* Our definitions, looked up in this library (its handle searches it
 * first; taken once, and kept), and the program's, in the global scope,
 * into t: the C++ ones of a program that loads libstdc++ later are found
 * by a later pass. Called with no lock of ours held: dlsym and dlopen
 * take the loader's lock, which a thread in dlopen holds while a
 * constructor it runs may call our dlopen wrapper (a lock order the other
 * way round would deadlock). */
static unsigned hooks_table(struct hook *t)
{
    static void *self;
    Dl_info di;
    if (!self && dladdr((void *)hooks_table, &di) && di.dli_fname) {
        self_base = (uintptr_t)di.dli_fbase;
        self = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    }
    if (!self)
        return 0;
    if (!real_dlopen)
        *(void **)&real_dlopen = dlsym(RTLD_DEFAULT, "dlopen");
    unsigned n = 0;
    for (unsigned i = 0; i < sizeof(hook_names) / sizeof(hook_names[0]); i++) {
        struct hook *h = &t[n];
        h->name = hook_names[i];
        h->real = (uintptr_t)dlsym(RTLD_DEFAULT, h->name);
        h->mine =
            strcmp(h->name, "dlopen") ? (uintptr_t)dlsym(self, h->name) : (uintptr_t)attach_dlopen;
        if (h->real && h->mine && h->real != h->mine)
            n++;
    }
    return n;
}

struct module {
    uintptr_t base, lo, hi;       /* load bias; its mapped extent */
    uintptr_t relro_lo, relro_hi; /* page-rounded PT_GNU_RELRO, 0 if none */
    const ElfW(Sym) * symtab;
    const char *strtab;
    unsigned patched_malloc;
};

static uintptr_t dyn_ptr(const struct module *m, ElfW(Addr) v)
{
    /* glibc relocates the d_ptr entries of a module's dynamic section in
     * place (elf/get-dynamic-info.h), except where it is read-only (the
     * vDSO): an address below the bias is an unrelocated one. */
    return v < m->base ? m->base + v : v;
}

static int slot_write(const struct module *m, uintptr_t *slot, uintptr_t v)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t at = (uintptr_t)slot & ~((uintptr_t)page - 1);
    int relro = (uintptr_t)slot >= m->relro_lo && (uintptr_t)slot < m->relro_hi;
    /* RELRO is read-only after start-up (ld.so's _dl_protect_relro): made
     * writable for the store and read-only again. An aligned 8-byte store
     * is atomic on x86-64: a thread calling through it sees one or the other. */
    if (relro && mprotect((void *)at, (size_t)page, PROT_READ | PROT_WRITE) != 0)
        return -1;
    __atomic_store_n(slot, v, __ATOMIC_RELEASE);
    if (relro)
        mprotect((void *)at, (size_t)page, PROT_READ);
    return 0;
}

static void reloc_one(struct module *m, const ElfW(Rela) * r)
{
    unsigned type = ELF64_R_TYPE(r->r_info);
    if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT && type != R_X86_64_64)
        return;
    unsigned sym = ELF64_R_SYM(r->r_info);
    if (!sym || (type == R_X86_64_64 && r->r_addend != 0))
        return;
    const char *name = m->strtab + m->symtab[sym].st_name;
    uintptr_t *slot = (uintptr_t *)(m->base + r->r_offset);
    for (unsigned i = 0; i < nhooks; i++) {
        struct hook *h = &hooks[i];
        if (strcmp(name, h->name) != 0)
            continue;
        uintptr_t v = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        int lazy = type == R_X86_64_JUMP_SLOT && v >= m->lo && v < m->hi;
        if (v == h->mine || ((v == h->real || lazy) && slot_write(m, slot, h->mine) == 0)) {
            if (h->name == hook_names[0])
                m->patched_malloc++;
        }
        return;
    }
}

static void relocs_walk(struct module *m, uintptr_t rela, uint64_t bytes)
{
    const ElfW(Rela) *r = (const ElfW(Rela) *)rela;
    for (uint64_t i = 0; rela && i < bytes / sizeof(*r); i++)
        reloc_one(m, &r[i]);
}

static void module_extent(struct module *m, const struct dl_phdr_info *info)
{
    long page = sysconf(_SC_PAGESIZE);
    m->lo = UINTPTR_MAX;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (ph->p_type == PT_LOAD) {
            m->lo = lo < m->lo ? lo : m->lo;
            m->hi = hi > m->hi ? hi : m->hi;
        } else if (ph->p_type == PT_GNU_RELRO) {
            m->relro_lo = lo & ~((uintptr_t)page - 1);
            m->relro_hi = (hi + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
        }
    }
}

static int module_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    unsigned *total = arg;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn || info->dlpi_addr == self_base)
        return 0;
    struct module m;
    memset(&m, 0, sizeof(m));
    m.base = info->dlpi_addr;
    module_extent(&m, info);
    uintptr_t rela = 0, jmprel = 0;
    uint64_t relasz = 0, pltrelsz = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB:
            m.symtab = (const ElfW(Sym) *)dyn_ptr(&m, dyn->d_un.d_ptr);
            break;
        case DT_STRTAB:
            m.strtab = (const char *)dyn_ptr(&m, dyn->d_un.d_ptr);
            break;
        case DT_RELA:
            rela = dyn_ptr(&m, dyn->d_un.d_ptr);
            break;
        case DT_RELASZ:
            relasz = dyn->d_un.d_val;
            break;
        case DT_JMPREL:
            jmprel = dyn_ptr(&m, dyn->d_un.d_ptr);
            break;
        case DT_PLTRELSZ:
            pltrelsz = dyn->d_un.d_val;
            break;
        }
    }
    if (!m.symtab || !m.strtab)
        return 0;
    relocs_walk(&m, rela, relasz);
    relocs_walk(&m, jmprel, pltrelsz); /* DT_PLTREL is DT_RELA on x86-64 */
    *total += m.patched_malloc;
    return 0;
}

/* The loader's count of modules it has mapped (dl_phdr_info's dlpi_adds,
 * glibc 2.4: dl_iterate_phdr(3)); 0 where the field is missing. */
static int adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs))
        *(unsigned long long *)arg = info->dlpi_adds;
    return 1; /* the first module says it */
}

static unsigned long long loads_now(void)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(adds_cb, &adds);
    return adds;
}

static unsigned long long loads_seen; /* dlpi_adds as of the last pass */
static int in_dlopen;                 /* threads inside attach_dlopen */

/* Every loaded module's slots: the number of malloc slots that point at
 * our hook afterwards (0: the program's malloc calls cannot be seen). */
AGENT_HIDDEN unsigned agent_got_patch_all(void)
{
    unsigned total = 0;
    struct hook t[HOOK_MAX];
    unsigned n = hooks_table(t);
    while (__atomic_exchange_n(&patch_lock, 1, __ATOMIC_ACQUIRE))
        sched_yield();
    memcpy(hooks, t, n * sizeof(t[0]));
    nhooks = n;
    __atomic_store_n(&loads_seen, loads_now(), __ATOMIC_RELAXED);
    dl_iterate_phdr(module_cb, &total);
    __atomic_store_n(&patch_lock, 0, __ATOMIC_RELEASE);
    return total;
}

/* The program's dlopen, then the new modules' slots. Not exported: only
 * slots that named dlopen reach it. */
static void *attach_dlopen(const char *file, int mode)
{
    __atomic_fetch_add(&in_dlopen, 1, __ATOMIC_ACQ_REL);
    void *h = real_dlopen(file, mode);
    if (h)
        agent_got_patch_all();
    __atomic_fetch_sub(&in_dlopen, 1, __ATOMIC_ACQ_REL);
    return h;
}

/* The watcher's tick: modules loaded since the last pass, not through the
 * program's dlopen (glibc loads NSS and iconv modules with its internal
 * __libc_dlopen_mode, which no slot names), get their slots now, counted.
 * A load under way in attach_dlopen is its own to patch. */
AGENT_HIDDEN void agent_got_recheck(void)
{
    if (__atomic_load_n(&in_dlopen, __ATOMIC_ACQUIRE))
        return;
    unsigned long long seen = __atomic_load_n(&loads_seen, __ATOMIC_RELAXED);
    unsigned long long now = loads_now();
    if (now == seen)
        return;
    agent_got_patch_all();
    for (unsigned long long i = seen; i < now; i++)
        agent_count(HTA_CNT_MODULES_LATE);
}

/*
 * The cached-rule unwinder (unwind-fast.h). The table: open addressing,
 * 2^15 slots of {pc, packed rule}, written under one lock, read without:
 * a writer empties a slot's pc, writes the rule, then publishes the pc; a
 * reader takes the rule only when the pc read before and after it is the
 * one it looks for (a seqlock whose sequence is the pc).
 */
#define _GNU_SOURCE
#include "unwind-fast.h"

#include "ht-cfi-rule.h"

/* Local unwinding only (libunwind(3)). */
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <libelf.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FU_SLOTS (1u << 15)
#define FU_PROBE 8u
#define FU_MODULES 256u

struct fu_slot {
    uint64_t pc; /* the address looked up (a return address - 1), 0: empty */
    uint64_t rule;
};

/* A packed rule: three int16 offsets and the shape. */
#define R_SIMPLE (1ull << 48)
#define R_CFA_RBP (1ull << 49)
#define R_RA_UNDEF (1ull << 50)
#define R_RBP_SAVED (1ull << 51)
#define R_RBP_UNDEF (1ull << 52)

static struct fu_slot table[FU_SLOTS];

struct fu_module {
    uintptr_t lo, hi, bias;
    int fd;
    Elf *elf;
    Dwarf_CFI *cfi; /* NULL: no .eh_frame (every rule of it RULE_OTHER) */
};

/* Under lock: the modules opened, the statistics. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fu_module modules[FU_MODULES];
static unsigned n_modules;
static struct fu_stats stats;
static uint64_t generation; /* read without the lock */
static unsigned evict_next;

/* The murmur3 finalizer (fmix64, public domain): return addresses a fixed
 * distance apart spread over the table. */
static uint32_t slot_of(uint64_t pc)
{
    pc ^= pc >> 33;
    pc *= 0xff51afd7ed558ccdull;
    pc ^= pc >> 33;
    pc *= 0xc4ceb9fe1a85ec53ull;
    pc ^= pc >> 33;
    return (uint32_t)pc & (FU_SLOTS - 1);
}

static int table_get(uint64_t pc, uint64_t *rule)
{
    uint32_t i = slot_of(pc);
    for (unsigned k = 0; k < FU_PROBE; k++) {
        struct fu_slot *s = &table[(i + k) & (FU_SLOTS - 1)];
        uint64_t p = __atomic_load_n(&s->pc, __ATOMIC_ACQUIRE);
        if (p == 0)
            return 0;
        if (p != pc)
            continue;
        uint64_t r = __atomic_load_n(&s->rule, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->pc, __ATOMIC_RELAXED) != pc)
            return 0;
        *rule = r;
        return 1;
    }
    return 0;
}

/* Under lock. */
static void slot_write(struct fu_slot *s, uint64_t pc, uint64_t rule)
{
    __atomic_store_n(&s->pc, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&s->rule, rule, __ATOMIC_RELAXED);
    __atomic_store_n(&s->pc, pc, __ATOMIC_RELEASE);
}

/* Under lock: the first empty slot of pc's probe window, or (counted) one
 * of its slots in turn. */
static void table_put(uint64_t pc, uint64_t rule)
{
    uint32_t i = slot_of(pc);
    for (unsigned k = 0; k < FU_PROBE; k++) {
        struct fu_slot *s = &table[(i + k) & (FU_SLOTS - 1)];
        if (__atomic_load_n(&s->pc, __ATOMIC_RELAXED) == 0) {
            slot_write(s, pc, rule);
            return;
        }
    }
    stats.evicted++;
    fu_note(FU_RULE_EVICTED);
    slot_write(&table[(i + evict_next++ % FU_PROBE) & (FU_SLOTS - 1)], pc, rule);
}

static int fits16(int32_t v)
{
    return v >= INT16_MIN && v <= INT16_MAX;
}

/* The fast path's rule from libdw's: 0 when not simple, or its offsets do
 * not fit. */
static uint64_t rule_pack(const struct unwind_rule *r)
{
    if (r->kind != RULE_SIMPLE || !fits16(r->cfa_off) || !fits16(r->ra_off) || !fits16(r->rbp_off))
        return 0;
    uint64_t v = R_SIMPLE | (uint16_t)r->cfa_off | (uint64_t)(uint16_t)r->ra_off << 16 |
                 (uint64_t)(uint16_t)r->rbp_off << 32;
    if (r->cfa_rbp)
        v |= R_CFA_RBP;
    if (r->ra_undefined)
        v |= R_RA_UNDEF;
    if (r->rbp_how == RBP_SAVED)
        v |= R_RBP_SAVED;
    else if (r->rbp_how == RBP_UNDEFINED)
        v |= R_RBP_UNDEF;
    return v;
}

struct find {
    uintptr_t pc;
    struct fu_module *m;
    char path[4096];
};

/* dl_iterate_phdr: the loaded object whose PT_LOAD segments span pc. */
static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find *f = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    int in = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
        lo = a < lo ? a : lo;
        hi = b > hi ? b : hi;
        in |= f->pc >= a && f->pc < b;
    }
    if (!in)
        return 0;
    f->m->lo = lo;
    f->m->hi = hi;
    f->m->bias = info->dlpi_addr;
    /* The main program's name is empty (dl_iterate_phdr(3)); the vDSO has
     * no file (its frames go to libunwind). */
    const char *name = info->dlpi_name;
    if (!name[0])
        name = "/proc/self/exe";
    else if (name[0] != '/')
        name = "";
    strncpy(f->path, name, sizeof(f->path) - 1);
    return 1;
}

/* Under lock: pc's module, opened now if new; NULL: in none. */
static struct fu_module *module_of(uintptr_t pc)
{
    for (unsigned i = 0; i < n_modules; i++)
        if (pc >= modules[i].lo && pc < modules[i].hi)
            return &modules[i];
    if (n_modules == FU_MODULES) {
        fu_note(FU_MODULES_FULL);
        return NULL;
    }
    static struct find f; /* under lock: 4 KiB off the target's stack */
    struct fu_module *m = &modules[n_modules];
    memset(m, 0, sizeof(*m));
    m->fd = -1;
    f.pc = pc;
    f.m = m;
    f.path[0] = 0;
    if (!dl_iterate_phdr(find_cb, &f)) {
        stats.no_module++;
        return NULL;
    }
    if (f.path[0])
        m->fd = open(f.path, O_RDONLY | O_CLOEXEC);
    if (m->fd >= 0)
        m->elf = elf_begin(m->fd, ELF_C_READ_MMAP, NULL);
    /* .eh_frame, what libunwind reads on x86-64 (libdw.h dwarf_getcfi_elf). */
    if (m->elf)
        m->cfi = dwarf_getcfi_elf(m->elf);
    n_modules++;
    return m;
}

/* Under lock: the packed rule at pc (0: not simple). */
static uint64_t rule_learn(uint64_t pc)
{
    struct fu_module *m = module_of(pc);
    if (!m)
        return 0;
    struct unwind_rule r;
    memset(&r, 0, sizeof(r));
    r.pc = pc;
    r.kind = RULE_OTHER;
    Dwarf_Frame *f;
    if (m->cfi && dwarf_cfi_addrframe(m->cfi, pc - m->bias, &f) == 0) {
        ht_cfi_rule(f, &r);
        free(f); /* malloc'd by libdw (libdw.h dwarf_cfi_addrframe) */
    }
    uint64_t v = rule_pack(&r);
    /* A rule of no simple shape is cached too (as 0 in the rule's shape
     * bits is not R_SIMPLE): its module is loaded, its CFI will not change. */
    table_put(pc, v ? v : 1);
    stats.learned++;
    return v;
}

static uint64_t rule_slow(uint64_t pc)
{
    fu_untraced(1);
    pthread_mutex_lock(&lock);
    uint64_t v;
    if (!table_get(pc, &v))
        v = rule_learn(pc);
    pthread_mutex_unlock(&lock);
    fu_untraced(-1);
    return v;
}

/* A read of the stack, only inside [lo, hi). */
static int stack_read(uintptr_t lo, uintptr_t hi, uintptr_t a, uintptr_t *v)
{
    if (a < lo || a > hi - 8 || (a & 7))
        return 0;
    *v = *(const uintptr_t *)a;
    return 1;
}

/* A slot the walk depends on, into tr (past FU_TRACE_MAX: counted only). */
static void trace_slot(struct fu_trace *tr, uintptr_t lo, uintptr_t a, uintptr_t v)
{
    if (!tr)
        return;
    if (tr->n < FU_TRACE_MAX) {
        tr->off[tr->n] = (uint32_t)(a - lo);
        tr->val[tr->n] = v;
    }
    if (tr->n <= FU_TRACE_MAX)
        tr->n++;
}

int fu_walk(uintptr_t pc, uintptr_t sp, uintptr_t rbp, uintptr_t hi, uint64_t *out, unsigned max,
            struct fu_trace *tr)
{
#if defined(__x86_64__)
    uintptr_t lo = sp;
    int rbp_ok = 1;
    /* Where rbp came from: the start (rbp_at 0) or a stack slot. A saved
     * rbp is in the trace only once a rule takes the CFA from it: code
     * without frame pointers saves rbp as any callee-saved register, with
     * a value that differs from call to call and changes no frame. */
    uintptr_t rbp_at = 0;
    int rbp_traced = 0;
    unsigned n = 0;
    if (tr) {
        tr->n = 0;
        tr->rbp_used = 0;
    }
    /* Offsets from sp fit the trace's 32 bits. */
    if (hi - sp > UINT32_MAX)
        return -1;
    while (n < max) {
        if (pc == 0) /* as libunwind: no frame there */
            return (int)n;
        out[n++] = pc;
        if (n == max)
            break;
        /* A return address is after the call: its rule is the call's, at
         * pc - 1 (as libunwind does for every frame but a signal's). */
        uint64_t r;
        if (!table_get(pc - 1, &r))
            r = rule_slow(pc - 1);
        if (!(r & R_SIMPLE) || ((r & R_CFA_RBP) && !rbp_ok))
            return -1;
        if ((r & R_CFA_RBP) && tr && !rbp_traced) {
            if (rbp_at)
                trace_slot(tr, lo, rbp_at, rbp);
            else
                tr->rbp_used = 1;
            rbp_traced = 1;
        }
        uintptr_t cfa = ((r & R_CFA_RBP) ? rbp : sp) + (uintptr_t)(int64_t)(int16_t)r;
        if (r & R_RA_UNDEF) /* the outermost frame (_start, clone) */
            return (int)n;
        /* The stack only grows down: a CFA at or below sp is a bad rule or
         * a corrupt rbp, libunwind's business. */
        uintptr_t ra_at = cfa + (uintptr_t)(int64_t)(int16_t)(r >> 16);
        if (cfa <= sp || !stack_read(lo, hi, ra_at, &pc))
            return -1;
        trace_slot(tr, lo, ra_at, pc);
        if (r & R_RBP_SAVED) {
            rbp_at = cfa + (uintptr_t)(int64_t)(int16_t)(r >> 32);
            if (!stack_read(lo, hi, rbp_at, &rbp))
                return -1;
            rbp_traced = 0;
        } else if (r & R_RBP_UNDEF) {
            rbp_ok = 0;
        }
        sp = cfa;
    }
    return (int)n;
#else
    (void)pc, (void)sp, (void)rbp, (void)hi, (void)out, (void)max, (void)tr;
    return -1;
#endif
}

/* unw_step(3) from here: what unw_backtrace gives, without its cache. */
static int step_walk(uint64_t *out, int max)
{
    unw_context_t uc;
    unw_cursor_t c;
    unw_word_t ip;
    int n = 0;
    if (unw_getcontext(&uc) || unw_init_local(&c, &uc))
        return 0;
    do {
        if (unw_get_reg(&c, UNW_REG_IP, &ip) || ip == 0)
            break;
        out[n++] = ip;
    } while (n < max && unw_step(&c) > 0);
    return n;
}

int fu_backtrace(uint64_t *out, int max)
{
    static __thread uint64_t gen_seen __attribute__((tls_model("initial-exec")));
    uint64_t gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    if (gen == 0)
        return unw_backtrace((void **)out, max);
    /* libunwind's own caches of procedure info are flushed (unw_flush_cache(3));
     * unw_backtrace's trace cache is not (tests/unit/agent: dlreload). */
    if (gen != gen_seen) {
        unw_flush_cache(unw_local_addr_space, 0, 0);
        gen_seen = gen;
    }
    return step_walk(out, max);
}

/* Under lock. */
static void forget_all(void)
{
    for (unsigned i = 0; i < FU_SLOTS; i++)
        if (__atomic_load_n(&table[i].pc, __ATOMIC_RELAXED))
            __atomic_store_n(&table[i].pc, 0, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < n_modules; i++) {
        if (modules[i].elf)
            elf_end(modules[i].elf); /* the CFI with it (libdw.h dwarf_getcfi_elf) */
        if (modules[i].fd >= 0)
            close(modules[i].fd);
    }
    n_modules = 0;
}

void fu_invalidate(void)
{
    fu_untraced(1);
    pthread_mutex_lock(&lock);
    forget_all();
    stats.invalidated++;
    __atomic_store_n(&generation, stats.invalidated, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    fu_untraced(-1);
}

/* dlclose is interposed (preloaded; attached, its slots are rewritten like
 * malloc's: got.c): a module unloaded may be followed by another at
 * its address, whose rules differ. The rules are forgotten after the real
 * dlclose (its frames were no longer on any stack; a walk meanwhile still
 * reads only stack slots, whatever rule it takes). */
/* Where the next dlclose is (hooks-cxx.c: RTLD_NEXT preloaded, the global
 * scope attached); weak, for the unwinder's checker built without it. */
extern __attribute__((weak, visibility("hidden"))) void *agent_next_handle;

__attribute__((visibility("default"))) int dlclose(void *handle)
{
    static int (*real)(void *);
    if (!real)
        real = (int (*)(void *))dlsym(&agent_next_handle ? agent_next_handle : RTLD_NEXT, "dlclose");
    int rc = real ? real(handle) : -1;
    fu_invalidate();
    return rc;
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

static void fork_child(void)
{
    pthread_mutex_unlock(&lock);
}

int fu_init(void)
{
    static int done;
    if (done)
        return 0;
    done = 1;
    elf_version(EV_CURRENT); /* libelf.h: before any elf_begin */
    return pthread_atfork(fork_prepare, fork_parent, fork_child) == 0 ? 0 : -1;
}

uint64_t fu_generation(void)
{
    return __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
}

void fu_stats(struct fu_stats *out)
{
    pthread_mutex_lock(&lock);
    *out = stats;
    pthread_mutex_unlock(&lock);
}

/* DWARF unwinding of copied user stacks: cached CFI rules, libdwfl for the rest. */
#include "unwind.h"

#include "ht-alloc.h"
#include "unwind-rules.h"

#include <elfutils/libdwfl.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

struct unwinder {
    uint64_t pid;
    Dwfl *dwfl;
    int stale;
    /* The record being unwound. */
    uint32_t tid;
    const struct hb_regs *regs;
    const uint8_t *stack;
    size_t len;
    uint64_t *frames;
    unsigned n, max;
    int cut; /* the unwind needed stack past a full copy */
    struct unwind_rules rules;
    int fast_off; /* every stack through libdwfl */
    uint64_t fast, fallbacks;
};

/* Separate debug files by build id only, under /usr/lib/debug (root's). The
 * daemon runs as root, and libdwfl's default path starts with the module's
 * own directory: a target without .eh_frame had the FIFO it put there under
 * its debuglink name opened, which blocked the unwinding thread for good (and
 * the session's stop with it); and a debuglink can climb out of any
 * directory with "../". */
static char *debuginfo_path = "/usr/lib/debug";

static const Dwfl_Callbacks proc_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_build_id_find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
    struct unwinder *u = arg;
    (void)dwfl;
    if (*thread_argp)
        return 0;
    *thread_argp = u;
    return (pid_t)u->tid;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
    (void)dwfl;
    (void)tid;
    *thread_argp = arg;
    return true;
}

/* Stack memory comes from the copy only: past it, the unwind ends. */
static bool stack_read(struct unwinder *u, uint64_t addr, uint64_t *result)
{
    uint64_t sp = u->regs->r[7];
    if (addr < sp)
        return false;
    if (addr - sp > u->len || u->len - (addr - sp) < sizeof(*result)) {
        /* A shorter copy ended at the stack's end: nothing is above it. */
        if (u->len == HB_STACK_COPY)
            u->cut = 1;
        return false;
    }
    memcpy(result, u->stack + (addr - sp), sizeof(*result));
    return true;
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
    uint64_t v;
    (void)dwfl;
    if (!stack_read(arg, addr, &v))
        return false;
    *result = v;
    return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *arg)
{
    struct unwinder *u = arg;
    Dwarf_Word regs[HB_NREGS];
    for (unsigned i = 0; i < HB_NREGS; i++)
        regs[i] = u->regs->r[i];
    /* DWARF numbers 0-16 are the general registers and the return address (rip). */
    return dwfl_thread_state_registers(thread, 0, HB_NREGS, regs);
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
    .next_thread = next_thread,
    .get_thread = get_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
};

static int dwfl_open(struct unwinder *u)
{
    if (u->dwfl)
        dwfl_end(u->dwfl);
    /* Rules hold addresses of the modules as they were mapped. */
    unwind_rules_clear(&u->rules);
    u->dwfl = dwfl_begin(&proc_callbacks);
    if (!u->dwfl)
        return UV_ENOMEM;
    dwfl_report_begin(u->dwfl);
    int rc = dwfl_linux_proc_report(u->dwfl, (pid_t)u->pid);
    dwfl_report_end(u->dwfl, NULL, NULL);
    if (rc != 0 || !dwfl_attach_state(u->dwfl, NULL, (pid_t)u->pid, &thread_callbacks, u)) {
        dwfl_end(u->dwfl);
        u->dwfl = NULL;
        return rc > 0 ? -rc : UV_EINVAL;
    }
    u->stale = 0;
    return 0;
}

int unwinder_new(struct unwinder **out, uint64_t pid)
{
    struct unwinder *u = ht_calloc(1, sizeof(*u));
    if (!u)
        return UV_ENOMEM;
    u->pid = pid;
    unwind_rules_init(&u->rules);
    /* Test knob: every stack through libdwfl, so a live trace can be
     * compared with the fast path's (integration.unwind_*). */
    const char *knob = getenv("HEAPTRACED_TEST_UNWIND_LIBDWFL");
    u->fast_off = knob && strcmp(knob, "1") == 0;
    int rc = dwfl_open(u);
    if (rc) {
        ht_free(u);
        return rc;
    }
    *out = u;
    return 0;
}

void unwinder_free(struct unwinder *u)
{
    if (!u)
        return;
    if (u->dwfl)
        dwfl_end(u->dwfl);
    unwind_rules_close(&u->rules);
    ht_free(u);
}

void unwinder_refresh(struct unwinder *u)
{
    u->stale = 1;
}

static int frame_cb(Dwfl_Frame *state, void *arg)
{
    struct unwinder *u = arg;
    Dwarf_Addr pc;
    bool activation;
    if (!dwfl_frame_pc(state, &pc, &activation) || pc == 0)
        return DWARF_CB_ABORT;
    u->frames[u->n++] = pc;
    return u->n < u->max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

/* One frame by its rule: rsp, rbp and pc of the caller. 1 to go on, 0 at
 * the end of the stack or of the copy, -1 when libdwfl must do the stack. */
static int fast_step(struct unwinder *u, const struct unwind_rule *r, uint64_t *rsp, uint64_t *rbp,
                     int *rbp_ok, uint64_t *pc)
{
    if (r->kind != RULE_SIMPLE || (r->cfa_rbp && !*rbp_ok))
        return -1;
    uint64_t cfa = (r->cfa_rbp ? *rbp : *rsp) + (uint64_t)(int64_t)r->cfa_off, v;
    /* libdwfl reads every saved register (frame_unwind.c handle_cfi): one
     * past the copy marks the stack cut there too. */
    if (r->has_slots)
        stack_read(u, cfa + (uint64_t)(int64_t)r->slot_max, &v);
    if (r->ra_undefined || !stack_read(u, cfa + (uint64_t)(int64_t)r->ra_off, pc))
        return 0;
    if (r->rbp_how == RBP_SAVED)
        *rbp_ok = stack_read(u, cfa + (uint64_t)(int64_t)r->rbp_off, rbp);
    else if (r->rbp_how == RBP_UNDEFINED)
        *rbp_ok = 0;
    *rsp = cfa;
    return 1;
}

/* The frames libdwfl would give, from cached rules: the count, or -1 when
 * a frame's rule is not simple (or out of memory). */
static int fast_run(struct unwinder *u)
{
    uint64_t rsp = u->regs->r[7], rbp = u->regs->r[6], pc = u->regs->r[16];
    int rbp_ok = 1;
    for (int initial = 1;; initial = 0) {
        if (pc == 0) /* as frame_cb: no frame there */
            return (int)u->n;
        u->frames[u->n++] = pc;
        if (u->n >= u->max)
            return (int)u->n;
        /* A return address is after the call: its rule is the call's, at
         * pc - 1 (libdwfl/frame_unwind.c, for all but the initial frame). */
        const struct unwind_rule *r = unwind_rules_get(&u->rules, u->dwfl, initial ? pc : pc - 1);
        if (!r)
            return -1;
        int rc = fast_step(u, r, &rsp, &rbp, &rbp_ok, &pc);
        if (rc <= 0)
            return rc == 0 ? (int)u->n : -1;
    }
}

unsigned unwinder_run(struct unwinder *u, uint32_t tid, const struct hb_regs *regs,
                      const uint8_t *stack, size_t len, uint64_t *frames, unsigned max)
{
    if (max == 0 || (u->stale && dwfl_open(u)) || !u->dwfl)
        return 0;
    u->tid = tid;
    u->regs = regs;
    u->stack = stack;
    u->len = len;
    u->frames = frames;
    u->n = 0;
    u->max = max;
    u->cut = 0;
    if (!u->fast_off && fast_run(u) >= 0) {
        u->fast++;
        return u->n;
    }
    u->fallbacks++;
    u->n = 0;
    u->cut = 0;
    /* Ends with an error at the end of the copy or of the CFI: the frames
     * found so far stand. */
    dwfl_getthread_frames(u->dwfl, (pid_t)tid, frame_cb, u);
    return u->n;
}

int unwinder_cut(const struct unwinder *u)
{
    return u->cut;
}

void unwinder_set_fast(struct unwinder *u, int on)
{
    u->fast_off = !on;
}

void unwinder_stats(const struct unwinder *u, struct unwinder_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (!u)
        return;
    st->fast = u->fast;
    st->fallbacks = u->fallbacks;
    st->rule_hits = u->rules.st.hits;
    st->rule_misses = u->rules.st.misses;
    st->rules_evicted = u->rules.st.evicted;
    st->rules = u->rules.st.entries;
}

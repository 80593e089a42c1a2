/* DWARF unwinding of copied user stacks with libdwfl. */
#include "unwind.h"

#include "ht-alloc.h"

#include <elfutils/libdwfl.h>
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
static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
    struct unwinder *u = arg;
    uint64_t sp = u->regs->r[7];
    (void)dwfl;
    if (addr < sp || addr - sp > u->len || u->len - (addr - sp) < sizeof(*result))
        return false;
    memcpy(result, u->stack + (addr - sp), sizeof(*result));
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
    /* Ends with an error at the end of the copy or of the CFI: the frames
     * found so far stand. */
    dwfl_getthread_frames(u->dwfl, (pid_t)tid, frame_cb, u);
    return u->n;
}

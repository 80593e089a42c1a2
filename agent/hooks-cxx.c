/*
 * C++ operator new and delete, every form (Itanium C++ ABI mangled names:
 * plain, array, nothrow, sized, aligned, and their combinations), written
 * in C so the agent needs no C++ runtime. Each forwards to the next
 * definition, looked up at its first call; where there is none (a C
 * program: nobody links libstdc++), new is malloc, or aligned_alloc, and a
 * failure aborts as an uncaught std::bad_alloc would.
 */
#define _GNU_SOURCE
#include "agent-int.h"

#include <dlfcn.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

typedef void *(*new_fn)(size_t);
typedef void *(*new_al_fn)(size_t, size_t);
typedef void *(*new_nt_fn)(size_t, const void *);
typedef void *(*new_al_nt_fn)(size_t, size_t, const void *);
typedef void (*del_fn)(void *);
typedef void (*del_x_fn)(void *, size_t);
typedef void (*del_xy_fn)(void *, size_t, size_t);

/* Where the next definition is looked up: after us when preloaded; the
 * global scope when attached (attach.c), where this library is not. */
AGENT_HIDDEN void *agent_next_handle = RTLD_NEXT;

static void *next_sym(void **slot, const char *name)
{
    void *f = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (!f) {
        agent_self.in_alloc++; /* dlsym may allocate: not the program's */
        f = dlsym(agent_next_handle, name);
        agent_self.in_alloc--;
        __atomic_store_n(slot, f, __ATOMIC_RELAXED);
    }
    return f;
}

static int enter(void)
{
    struct agent_thread *t = &agent_self;
    if (t->in_hook)
        return -1;
    return t->in_alloc++ == 0;
}

static void leave(int outer)
{
    if (outer >= 0)
        agent_self.in_alloc--;
}

static void *fallback_new(size_t n, size_t align, int nothrow)
{
    void *p = align ? aligned_alloc(align, (n + align - 1) / align * align) : malloc(n ? n : 1);
    if (!p && !nothrow)
        abort();
    return p;
}

static void *do_new(void **slot, const char *name, int form, size_t n, size_t align, const void *nt)
{
    void *f = next_sym(slot, name);
    int outer = enter();
    void *p;
    if (!f)
        p = fallback_new(n, align, form & 2);
    else if (form == 0)
        p = ((new_fn)f)(n);
    else if (form == 1)
        p = ((new_al_fn)f)(n, align);
    else if (form == 2)
        p = ((new_nt_fn)f)(n, nt);
    else
        p = ((new_al_nt_fn)f)(n, align, nt);
    leave(outer);
    if (outer == 1 && p)
        agent_alloc((uintptr_t)p, n);
    return p;
}

static void do_delete(void **slot, const char *name, int args, void *p, size_t a, size_t b)
{
    if (!p)
        return;
    void *f = next_sym(slot, name);
    int want = !agent_self.in_hook && !agent_self.in_alloc && agent_free_wanted((uintptr_t)p);
    int outer = enter();
    if (!f)
        free(p);
    else if (args == 0)
        ((del_fn)f)(p);
    else if (args == 1)
        ((del_x_fn)f)(p, a);
    else
        ((del_xy_fn)f)(p, a, b);
    leave(outer);
    if (outer == 1 && want)
        agent_free_record((uintptr_t)p);
}

#define NEW(sym, form, params, n, align, nt)                                                       \
    EXPORT void *sym params                                                                        \
    {                                                                                              \
        static void *next;                                                                         \
        return do_new(&next, #sym, form, n, align, nt);                                            \
    }
#define DEL(sym, args, params, a, b)                                                               \
    EXPORT void sym params                                                                         \
    {                                                                                              \
        static void *next;                                                                         \
        do_delete(&next, #sym, args, p, a, b);                                                     \
    }

/* operator new / new[] (size_t), aligned (std::align_val_t), nothrow, both. */
NEW(_Znwm, 0, (size_t n), n, 0, NULL)
NEW(_Znam, 0, (size_t n), n, 0, NULL)
NEW(_ZnwmSt11align_val_t, 1, (size_t n, size_t al), n, al, NULL)
NEW(_ZnamSt11align_val_t, 1, (size_t n, size_t al), n, al, NULL)
NEW(_ZnwmRKSt9nothrow_t, 2, (size_t n, const void *nt), n, 0, nt)
NEW(_ZnamRKSt9nothrow_t, 2, (size_t n, const void *nt), n, 0, nt)
NEW(_ZnwmSt11align_val_tRKSt9nothrow_t, 3, (size_t n, size_t al, const void *nt), n, al, nt)
NEW(_ZnamSt11align_val_tRKSt9nothrow_t, 3, (size_t n, size_t al, const void *nt), n, al, nt)

/* operator delete / delete[]: plain, sized, aligned, sized and aligned, nothrow. */
DEL(_ZdlPv, 0, (void *p), 0, 0)
DEL(_ZdaPv, 0, (void *p), 0, 0)
DEL(_ZdlPvm, 1, (void *p, size_t n), n, 0)
DEL(_ZdaPvm, 1, (void *p, size_t n), n, 0)
DEL(_ZdlPvSt11align_val_t, 1, (void *p, size_t al), al, 0)
DEL(_ZdaPvSt11align_val_t, 1, (void *p, size_t al), al, 0)
DEL(_ZdlPvmSt11align_val_t, 2, (void *p, size_t n, size_t al), n, al)
DEL(_ZdaPvmSt11align_val_t, 2, (void *p, size_t n, size_t al), n, al)
DEL(_ZdlPvRKSt9nothrow_t, 1, (void *p, const void *nt), (size_t)nt, 0)
DEL(_ZdaPvRKSt9nothrow_t, 1, (void *p, const void *nt), (size_t)nt, 0)
DEL(_ZdlPvSt11align_val_tRKSt9nothrow_t, 2, (void *p, size_t al, const void *nt), al, (size_t)nt)
DEL(_ZdaPvSt11align_val_tRKSt9nothrow_t, 2, (void *p, size_t al, const void *nt), al, (size_t)nt)

/* Symbolizer for a live Windows process: DbgHelp on one dedicated thread, answers cached per
 * address. */
#include "symcache.h"

#include "ht-alloc.h"
#include "ht-error.h"
#include "mem-acct.h"
#include "procmods.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include <windows.h>
#include <dbghelp.h>

/* Answers cached per cache (a table of this many slots at most, then lookups
 * go to DbgHelp each time). */
#define SYM_ANSWERS_MAX (1u << 20)
#define SYM_NAME_MAX 1024 /* UTF-8 bytes of a function name; longer names are cut */
#define SYM_FILE_MAX 1024

/* ---- the DbgHelp thread ----
 * "All DbgHelp functions are single threaded" (learn.microsoft.com, About
 * DbgHelp): every DbgHelp call in the process is made on this one thread,
 * which serves the requests of every cache in order. It starts with the first
 * cache and lives as long as the process. */

/* One target as DbgHelp knows it; owned by the DbgHelp thread once created. */
struct dbg_session {
    uint64_t pid;
    HANDLE proc; /* the SymInitializeW key; NULL until the first request */
    int init_failed;
};

enum { REQ_LOOKUP, REQ_UNLOAD, REQ_CLEANUP };

struct sym_req {
    struct sym_req *next;
    int op, refs, started, done;
    struct dbg_session *s;
    uint64_t addr;
    /* REQ_LOOKUP: the module to load first (load_path non-NULL), or to unload (REQ_UNLOAD). */
    uint64_t mod_base, mod_size;
    WCHAR *load_path;
    /* answers */
    int load_ok, sym_ok, line_ok;
    char name[SYM_NAME_MAX];
    char file[SYM_FILE_MAX];
    unsigned line;
};

static uv_once_t g_once = UV_ONCE_INIT;
static int g_start_err;
static uv_mutex_t g_mu;
static uv_cond_t g_work, g_done;
static struct sym_req *g_head, *g_tail;
static uv_thread_t g_thread;
static WCHAR *g_search_path; /* under g_mu */

static void utf8_of(const WCHAR *w, char *out, size_t outsz)
{
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, out, (int)outsz, NULL, NULL);
    if (n <= 0) {
        /* Too long for out: the prefix that fits. */
        size_t wl = wcslen(w);
        out[0] = '\0';
        while (wl > 0 && n <= 0) {
            wl = wl * 3 / 4;
            n = WideCharToMultiByte(CP_UTF8, 0, w, (int)wl, out, (int)outsz - 1, NULL, NULL);
        }
        out[n > 0 ? n : 0] = '\0';
    }
}

/* UTF-8 to a new UTF-16 string (ht_free), NULL on bad input or no memory. */
static WCHAR *wide_of(const char *s)
{
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, NULL, 0);
    if (n <= 0)
        return NULL;
    WCHAR *w = ht_malloc((size_t)n * sizeof *w);
    if (w && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, w, n) != n) {
        ht_free(w);
        w = NULL;
    }
    return w;
}

/* Test knobs (test builds only, as the server's): HEAPTRACE_TEST_SYM_DELAY_MS, a
 * delay before each lookup the DbgHelp thread serves, and HEAPTRACE_TEST_SYM_WAIT_MS, the
 * caller's bound instead of SYM_WAIT_MS: the tests of a lookup that times out. */
static uint64_t knob_ms(const char *name, uint64_t dflt)
{
#ifdef HEAPTRACE_TEST_KNOBS
    const char *v = getenv(name);
    if (v && *v)
        return strtoull(v, NULL, 10);
#else
    (void)name;
#endif
    return dflt;
}

static void req_put(struct sym_req *r)
{
    if (--r->refs > 0)
        return;
    ht_free(r->load_path);
    ht_free(r);
}

/* The search path for a new session: the configured one, then _NT_SYMBOL_PATH;
 * NULL (DbgHelp's default, which reads _NT_SYMBOL_PATH itself) when none was
 * configured. A new string (ht_free). */
static WCHAR *session_search_path(void)
{
    uv_mutex_lock(&g_mu);
    WCHAR *cfg = NULL;
    if (g_search_path) {
        size_t n = wcslen(g_search_path) + 1;
        cfg = ht_malloc(n * sizeof *cfg);
        if (cfg)
            memcpy(cfg, g_search_path, n * sizeof *cfg);
    }
    uv_mutex_unlock(&g_mu);
    if (!cfg)
        return NULL;
    WCHAR env[4096];
    DWORD el = GetEnvironmentVariableW(L"_NT_SYMBOL_PATH", env, sizeof env / sizeof *env);
    if (el == 0 || el >= sizeof env / sizeof *env)
        return cfg;
    size_t cl = wcslen(cfg);
    WCHAR *both = ht_malloc((cl + 1 + el + 1) * sizeof *both);
    if (!both)
        return cfg;
    memcpy(both, cfg, cl * sizeof *both);
    both[cl] = L';';
    memcpy(both + cl + 1, env, ((size_t)el + 1) * sizeof *both);
    ht_free(cfg);
    return both;
}

/* SymInitializeW for the session's target, once. */
static int session_init(struct dbg_session *s)
{
    if (s->proc)
        return 1;
    if (s->init_failed)
        return 0;
    s->init_failed = 1;
    /* The handle is the session's key (learn.microsoft.com, SymInitializeW:
     * "should be unique and nonzero"); a real handle to the target lets
     * DbgHelp read its memory. Held until SymCleanup: the symbols of a target
     * that exited still resolve from the module files. */
    HANDLE h = OpenProcess(PROCESS_QUERY_INFORMATION | PROCESS_VM_READ, FALSE, (DWORD)s->pid);
    if (!h)
        return 0;
    WCHAR *path = session_search_path();
    /* fInvadeProcess FALSE: modules are loaded one by one, as lookups meet them. */
    BOOL ok = SymInitializeW(h, path, FALSE);
    ht_free(path);
    if (!ok) {
        CloseHandle(h);
        return 0;
    }
    s->proc = h;
    s->init_failed = 0;
    return 1;
}

static void serve_lookup(struct sym_req *r)
{
    struct dbg_session *s = r->s;
    if (!session_init(s))
        return;
    if (r->load_path) {
        SetLastError(ERROR_SUCCESS);
        DWORD64 b = SymLoadModuleExW(s->proc, NULL, r->load_path, NULL, r->mod_base,
                                     (DWORD)r->mod_size, NULL, 0);
        /* 0 with ERROR_SUCCESS: already loaded (learn.microsoft.com, SymLoadModuleEx). */
        r->load_ok = b != 0 || GetLastError() == ERROR_SUCCESS;
    }
    union {
        SYMBOL_INFOW si;
        char buf[sizeof(SYMBOL_INFOW) + SYM_NAME_MAX * sizeof(WCHAR)];
    } u;
    memset(&u.si, 0, sizeof u.si);
    u.si.SizeOfStruct = sizeof u.si;
    u.si.MaxNameLen = SYM_NAME_MAX - 1;
    DWORD64 disp = 0;
    if (SymFromAddrW(s->proc, r->addr, &disp, &u.si) && u.si.NameLen > 0) {
        u.si.Name[u.si.NameLen < SYM_NAME_MAX - 1 ? u.si.NameLen : SYM_NAME_MAX - 1] = 0;
        utf8_of(u.si.Name, r->name, sizeof r->name);
        r->sym_ok = r->name[0] != '\0';
    }
    IMAGEHLP_LINEW64 ln;
    memset(&ln, 0, sizeof ln);
    ln.SizeOfStruct = sizeof ln;
    DWORD ldisp = 0;
    if (SymGetLineFromAddrW64(s->proc, r->addr, &ldisp, &ln) && ln.FileName && ln.LineNumber > 0) {
        utf8_of(ln.FileName, r->file, sizeof r->file);
        r->line = ln.LineNumber;
        r->line_ok = r->file[0] != '\0';
    }
}

static void serve(struct sym_req *r)
{
    switch (r->op) {
    case REQ_LOOKUP:
        serve_lookup(r);
        break;
    case REQ_UNLOAD:
        if (r->s->proc)
            SymUnloadModule64(r->s->proc, r->mod_base);
        break;
    case REQ_CLEANUP:
        if (r->s->proc) {
            SymCleanup(r->s->proc);
            CloseHandle(r->s->proc);
        }
        ht_free(r->s);
        r->s = NULL;
        break;
    }
}

static void dbghelp_thread(void *arg)
{
    (void)arg;
    /* Process-wide options, set on this thread before any session: names
     * undecorated, modules read on first use, line numbers, and no error box
     * for a missing file or drive (learn.microsoft.com, SymSetOptions). */
    SymSetOptions(SYMOPT_DEFERRED_LOADS | SYMOPT_UNDNAME | SYMOPT_LOAD_LINES |
                  SYMOPT_FAIL_CRITICAL_ERRORS);
    uv_mutex_lock(&g_mu);
    for (;;) {
        while (!g_head)
            uv_cond_wait(&g_work, &g_mu);
        struct sym_req *r = g_head;
        g_head = r->next;
        if (!g_head)
            g_tail = NULL;
        r->started = 1;
        uv_mutex_unlock(&g_mu);
        if (r->op == REQ_LOOKUP)
            Sleep((DWORD)knob_ms("HEAPTRACE_TEST_SYM_DELAY_MS", 0));
        serve(r);
        uv_mutex_lock(&g_mu);
        r->done = 1;
        req_put(r);
        uv_cond_broadcast(&g_done);
    }
}

static void start_once(void)
{
    if (uv_mutex_init(&g_mu) || uv_cond_init(&g_work) || uv_cond_init(&g_done)) {
        g_start_err = UV_ENOMEM;
        return;
    }
    g_start_err = uv_thread_create(&g_thread, dbghelp_thread, NULL);
}

static int worker_start(void)
{
    uv_once(&g_once, start_once);
    return g_start_err;
}

/* Queue r (the queue holds one reference). */
static void req_send(struct sym_req *r)
{
    r->refs++;
    r->next = NULL;
    if (g_tail)
        g_tail->next = r;
    else
        g_head = r;
    g_tail = r;
    uv_cond_signal(&g_work);
}

/* Send r and wait for its answer at most SYM_WAIT_MS. 0, or UV_ETIMEDOUT
 * (r is then abandoned: unqueued if not started, else freed when done). */
static int req_call(struct sym_req *r)
{
    uint64_t deadline = uv_hrtime() + knob_ms("HEAPTRACE_TEST_SYM_WAIT_MS", SYM_WAIT_MS) * 1000000u;
    uv_mutex_lock(&g_mu);
    req_send(r);
    while (!r->done) {
        uint64_t now = uv_hrtime();
        if (now >= deadline || uv_cond_timedwait(&g_done, &g_mu, deadline - now) == UV_ETIMEDOUT) {
            if (r->done)
                break;
            if (!r->started) {
                struct sym_req **pp = &g_head, *prev = NULL;
                while (*pp && *pp != r) {
                    prev = *pp;
                    pp = &(*pp)->next;
                }
                if (*pp) {
                    *pp = r->next;
                    if (g_tail == r)
                        g_tail = prev;
                    r->refs--;
                }
            }
            uv_mutex_unlock(&g_mu);
            return UV_ETIMEDOUT;
        }
    }
    uv_mutex_unlock(&g_mu);
    return 0;
}

/* The caller's reference, dropped under the lock (the DbgHelp thread may
 * still hold the other one after a timeout). */
static void req_release(struct sym_req *r)
{
    uv_mutex_lock(&g_mu);
    req_put(r);
    uv_mutex_unlock(&g_mu);
}

/* Send r without waiting: the DbgHelp thread frees it. */
static void req_post(struct sym_req *r)
{
    uv_mutex_lock(&g_mu);
    req_send(r);
    r->refs--; /* the caller's: the queue's is the only one left */
    uv_mutex_unlock(&g_mu);
}

int sym_set_search_path(const char *path)
{
    WCHAR *w = NULL;
    if (path && path[0] && !(w = wide_of(path)))
        return HT_EBADARG;
    int err = worker_start();
    if (err) {
        ht_free(w);
        return err;
    }
    uv_mutex_lock(&g_mu);
    WCHAR *old = g_search_path;
    g_search_path = w;
    uv_mutex_unlock(&g_mu);
    ht_free(old);
    return 0;
}

/* ---- the cache, on the caller's thread ---- */

struct sym_answer {
    uint64_t addr; /* 0: empty slot */
    char *text;    /* "module!function" or "module!+0xOFF" */
    char *file;    /* NULL: no line info */
    unsigned line;
    uint32_t text_len, file_len; /* bytes allocated, with the NUL */
};

/* The Windows part of a cache (symcache.h): its DbgHelp session and its
 * answers. A module's image is 0 once loaded in DbgHelp. */
struct sym_os {
    struct dbg_session *s;
    struct sym_answer *ans; /* open addressing, capans a power of two */
    size_t nans, capans;
};

static char *acct_strdup(struct sym_cache *c, const char *s, uint32_t *len)
{
    size_t n = strlen(s) + 1;
    char *p = symcache_alloc(c, n);
    if (p)
        memcpy(p, s, n);
    *len = p ? (uint32_t)n : 0;
    return p;
}

static int sym_os_new(struct sym_cache *c)
{
    if (worker_start())
        return UV_ENOMEM;
    struct sym_os *os = ht_calloc(1, sizeof *os);
    struct dbg_session *s = ht_calloc(1, sizeof *s);
    if (!os || !s) {
        ht_free(os);
        ht_free(s);
        return UV_ENOMEM;
    }
    s->pid = c->pid;
    os->s = s;
    c->os = os;
    return 0;
}

static void answers_clear(struct sym_cache *c)
{
    for (size_t i = 0; i < c->os->capans; i++) {
        struct sym_answer *a = &c->os->ans[i];
        if (!a->addr)
            continue;
        symcache_free(c, a->text, a->text_len);
        symcache_free(c, a->file, a->file_len);
        memset(a, 0, sizeof *a);
    }
    c->os->nans = 0;
    c->st.symbols = 0;
}

static void sym_os_free(struct sym_cache *c)
{
    struct sym_req *r = ht_calloc(1, sizeof *r);
    if (r) {
        r->op = REQ_CLEANUP;
        r->s = c->os->s;
        r->refs = 1;
        req_post(r);
    }
    /* else: without memory for the request the session leaks rather than
     * racing the DbgHelp thread. */
    answers_clear(c);
    symcache_free(c, c->os->ans, c->os->capans * sizeof *c->os->ans);
    ht_free(c->os);
}

/* ---- answers ---- */

static size_t ans_slot(const struct sym_cache *c, uint64_t addr)
{
    uint64_t h = addr * 0x9e3779b97f4a7c15ull;
    size_t mask = c->os->capans - 1;
    size_t i = (size_t)(h >> 20) & mask;
    while (c->os->ans[i].addr && c->os->ans[i].addr != addr)
        i = (i + 1) & mask;
    return i;
}

static struct sym_answer *ans_find(struct sym_cache *c, uint64_t addr)
{
    if (!c->os->capans || !addr)
        return NULL;
    struct sym_answer *a = &c->os->ans[ans_slot(c, addr)];
    return a->addr ? a : NULL;
}

static int ans_grow(struct sym_cache *c)
{
    size_t cap = c->os->capans ? c->os->capans * 2 : 256;
    if (cap > SYM_ANSWERS_MAX)
        return HT_EFULL;
    struct sym_answer *v = symcache_alloc(c, cap * sizeof *v);
    if (!v)
        return UV_ENOMEM;
    memset(v, 0, cap * sizeof *v);
    struct sym_answer *old = c->os->ans;
    size_t oldcap = c->os->capans;
    c->os->ans = v;
    c->os->capans = cap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].addr)
            c->os->ans[ans_slot(c, old[i].addr)] = old[i];
    symcache_free(c, old, oldcap * sizeof *old);
    return 0;
}

/* Keep an answer; NULL when it cannot be kept (cap, memory): the caller
 * answers from its own copy. */
static struct sym_answer *ans_put(struct sym_cache *c, uint64_t addr, const char *text,
                                  const char *file, unsigned line)
{
    if (!addr || ((c->os->nans + 1) * 4 > c->os->capans * 3 && ans_grow(c) != 0))
        return NULL;
    struct sym_answer a = {.addr = addr, .line = line};
    a.text = acct_strdup(c, text, &a.text_len);
    if (file)
        a.file = acct_strdup(c, file, &a.file_len);
    if (!a.text || (file && !a.file)) {
        symcache_free(c, a.text, a.text_len);
        symcache_free(c, a.file, a.file_len);
        return NULL;
    }
    struct sym_answer *slot = &c->os->ans[ans_slot(c, addr)];
    *slot = a;
    c->os->nans++;
    c->st.symbols++;
    return slot;
}

/* ---- the module list ---- */

static int sym_os_module_check(uint64_t start, uint64_t end, const char *path, const char *build_id)
{
    (void)build_id; /* a PE image is known by its file; DbgHelp checks its PDB signature */
    if (!path || !path[0] || end <= start || end - start > 0xffffffffu ||
        strlen(path) >= PROCMODS_PATH_MAX)
        return HT_EBADARG;
    return 0;
}

/* A module goes: DbgHelp forgets it, and the answers (some were in it) go. */
static void sym_os_module_dropped(struct sym_cache *c, struct sym_module *m)
{
    if (m->image >= 0) {
        struct sym_req *r = ht_calloc(1, sizeof *r);
        if (r) {
            r->op = REQ_UNLOAD;
            r->s = c->os->s;
            r->mod_base = m->start;
            r->refs = 1;
            req_post(r);
        }
    }
    answers_clear(c);
}

/* Re-read the target's modules: a scanned module still there (same range
 * and file) stays as it is, others of earlier scans go, added ones stay. */
static void sym_os_rescan(struct sym_cache *c)
{
    struct procmods_module *v;
    size_t n;
    if (procmods_list(c->pid, &v, &n) != 0)
        return;
    for (size_t i = c->nmods; i-- > 0;) {
        struct sym_module *m = &c->mods[i];
        if (m->from_maps != MOD_SCAN)
            continue;
        int still = 0;
        for (size_t k = 0; k < n && !still; k++)
            still = v[k].base == m->start && v[k].base + v[k].size == m->end &&
                    strcmp(v[k].path, m->path) == 0;
        if (!still)
            symcache_mod_drop(c, i);
    }
    for (size_t k = 0; k < n; k++) {
        if (!v[k].size || symcache_mod_at(c, v[k].base))
            continue;
        struct sym_module m = {.start = v[k].base,
                               .end = v[k].base + v[k].size,
                               .bias = v[k].base,
                               .path = v[k].path,
                               .image = -1};
        symcache_scan_add(c, &m);
    }
    ht_free(v);
}

/* ---- lookups ---- */

/* The answer for addr: cached, else asked of the DbgHelp thread and cached.
 * NULL when no module holds addr (or no memory); *tmp receives an answer
 * that could not be kept. */
static const struct sym_answer *lookup(struct sym_cache *c, uint64_t addr, struct sym_answer *tmp,
                                       char *textbuf, size_t textsz, int count)
{
    struct sym_answer *a = ans_find(c, addr);
    if (a) {
        if (count && strstr(a->text, "!+0x"))
            c->st.misses++;
        return a;
    }
    struct sym_module *m = symcache_mod_for(c, addr);
    if (!m) {
        if (count)
            c->st.misses++;
        return NULL;
    }
    const char *modname = procmods_basename(m->path);
    struct sym_req *r = ht_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->op = REQ_LOOKUP;
    r->s = c->os->s;
    r->addr = addr;
    r->refs = 1;
    int asked_load = 0;
    if (m->image == -1) {
        r->load_path = wide_of(m->path);
        r->mod_base = m->start;
        r->mod_size = m->end - m->start;
        asked_load = r->load_path != NULL;
        if (!asked_load)
            m->image = -2;
    }
    int err = req_call(r);
    if (err) {
        /* No answer in time: this lookup reads module!+0xOFF, not cached. */
        c->st.timeouts++;
        if (count)
            c->st.misses++;
        snprintf(textbuf, textsz, "%s!+0x%" PRIx64, modname, addr - m->bias);
        *tmp = (struct sym_answer){.addr = addr, .text = textbuf};
        req_release(r);
        return tmp;
    }
    if (asked_load) {
        m->image = r->load_ok ? 0 : -2;
        if (r->load_ok)
            c->st.modules++;
        else
            c->st.load_errors++;
    }
    if (r->sym_ok)
        snprintf(textbuf, textsz, "%s!%s", modname, r->name);
    else
        snprintf(textbuf, textsz, "%s!+0x%" PRIx64, modname, addr - m->bias);
    if (!r->sym_ok && count)
        c->st.misses++;
    a = ans_put(c, addr, textbuf, r->line_ok ? r->file : NULL, r->line);
    if (!a) {
        *tmp = (struct sym_answer){.addr = addr, .text = textbuf, .line = r->line};
        /* tmp->file would point into r: line info is not kept then. */
    }
    req_release(r);
    return a ? a : tmp;
}

static const char *sym_os_resolve(struct sym_cache *c, uint64_t addr, char *buf, size_t bufsz)
{
    char text[SYM_NAME_MAX + PROCMODS_PATH_MAX + 32];
    struct sym_answer tmp;
    const struct sym_answer *a = lookup(c, addr, &tmp, text, sizeof text, 1);
    if (!a)
        return NULL;
    snprintf(buf, bufsz, "%s", a->text);
    return buf;
}

static int sym_os_lineinfo(struct sym_cache *c, uint64_t addr, char *file, size_t filesz,
                           unsigned *line)
{
    char text[SYM_NAME_MAX + PROCMODS_PATH_MAX + 32];
    struct sym_answer tmp;
    const struct sym_answer *a = lookup(c, addr, &tmp, text, sizeof text, 0);
    if (!a || !a->file || a->line == 0)
        return UV_ENOENT;
    snprintf(file, filesz, "%s", a->file);
    *line = a->line;
    return 0;
}

static void sym_os_stats(const struct sym_cache *c, struct sym_stats *st)
{
    (void)c; /* DbgHelp gives no hint */
    (void)st;
}

static const struct sym_os_ops os_ops = {
    .new = sym_os_new,
    .free = sym_os_free,
    .module_check = sym_os_module_check,
    .module_dropped = sym_os_module_dropped,
    .rescan = sym_os_rescan,
    .resolve = sym_os_resolve,
    .lineinfo = sym_os_lineinfo,
    .stats = sym_os_stats,
};

int sym_cache_new(struct sym_cache **out, uint64_t pid, struct mem_acct *acct, int kind)
{
    return symcache_new(out, pid, acct, kind, &os_ops);
}

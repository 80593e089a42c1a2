/* Process services on Windows (daemon/sys, *-win.c): private bytes, modules, DbgHelp symbols and
 * the exit watch, against a child (sym-child-win.c) that prints its own addresses. Runs under
 * wine; what wine's dbghelp cannot do skips with 77 and says so
 * (docs/windows.md#what-wine-does-and-does-not-do). */
#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-test.h"
#include "mem-acct.h"
#include "procmem.h"
#include "procmods.h"
#include "procwatch.h"
#include "symbols.h"

#include <uv.h>
#include <windows.h>

int ht_test_failed;

/* ---- the child, talking over pipes ---- */

#define CHILD_NAMES 16

struct child {
    PROCESS_INFORMATION pi;
    HANDLE in, out; /* its stdin (we write), its stdout (we read) */
    char buf[4096];
    size_t len;
    int n;
    char names[CHILD_NAMES][32];
    uint64_t vals[CHILD_NAMES];
};

/* One line from the child (without its CR LF) into line; 0, or -1 at its end. */
static int child_line(struct child *ch, char *line, size_t sz)
{
    for (;;) {
        char *nl = memchr(ch->buf, '\n', ch->len);
        if (nl) {
            size_t l = (size_t)(nl - ch->buf);
            size_t k = l;
            if (k > 0 && ch->buf[k - 1] == '\r')
                k--;
            if (k >= sz)
                k = sz - 1;
            memcpy(line, ch->buf, k);
            line[k] = '\0';
            memmove(ch->buf, nl + 1, ch->len - l - 1);
            ch->len -= l + 1;
            return 0;
        }
        DWORD got = 0;
        if (ch->len == sizeof ch->buf ||
            !ReadFile(ch->out, ch->buf + ch->len, (DWORD)(sizeof ch->buf - ch->len), &got, NULL) ||
            got == 0)
            return -1;
        ch->len += got;
    }
}

static int child_send(struct child *ch, const char *cmd)
{
    DWORD put = 0;
    return WriteFile(ch->in, cmd, (DWORD)strlen(cmd), &put, NULL) && put == strlen(cmd) ? 0 : -1;
}

static int child_start(struct child *ch)
{
    memset(ch, 0, sizeof *ch);
    SECURITY_ATTRIBUTES sa = {.nLength = sizeof sa, .bInheritHandle = TRUE};
    HANDLE in_r, in_w, out_r, out_w;
    if (!CreatePipe(&in_r, &in_w, &sa, 0) || !CreatePipe(&out_r, &out_w, &sa, 0))
        return -1;
    SetHandleInformation(in_w, HANDLE_FLAG_INHERIT, 0);
    SetHandleInformation(out_r, HANDLE_FLAG_INHERIT, 0);
    STARTUPINFOW si = {.cb = sizeof si, .dwFlags = STARTF_USESTDHANDLES};
    si.hStdInput = in_r;
    si.hStdOutput = out_w;
    si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
    /* The child is built next to this program (a Unix path means nothing to CreateProcessW). */
    WCHAR exe[1024], cmd[1100];
    DWORD el = GetModuleFileNameW(NULL, exe, 1024);
    if (el == 0 || el >= 1024)
        return -1;
    WCHAR *slash = wcsrchr(exe, L'\\');
    if (slash)
        slash[1] = 0;
    swprintf(cmd, sizeof cmd / sizeof *cmd, L"\"%lsht-sym-child-win.exe\"", exe);
    BOOL ok = CreateProcessW(NULL, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &ch->pi);
    CloseHandle(in_r);
    CloseHandle(out_w);
    ch->in = in_w;
    ch->out = out_r;
    if (!ok) {
        fprintf(stderr, "CreateProcessW %ls: error %lu\n", cmd, GetLastError());
        return -1;
    }
    char line[256];
    while (child_line(ch, line, sizeof line) == 0) {
        char name[32];
        unsigned long long v;
        if (strcmp(line, "ready") == 0)
            return 0;
        if (ch->n < CHILD_NAMES && sscanf(line, "%31s %llx", name, &v) == 2) {
            if (strstr(name, "_line"))
                sscanf(line, "%31s %llu", name, &v);
            snprintf(ch->names[ch->n], sizeof ch->names[0], "%s", name);
            ch->vals[ch->n++] = v;
        }
    }
    return -1;
}

static uint64_t child_val(const struct child *ch, const char *name)
{
    for (int i = 0; i < ch->n; i++)
        if (strcmp(ch->names[i], name) == 0)
            return ch->vals[i];
    return 0;
}

static uint64_t child_pid(const struct child *ch)
{
    return ch->pi.dwProcessId;
}

/* Tell it to quit and wait for it; its exit code. */
static DWORD child_end(struct child *ch)
{
    DWORD code = 0;
    child_send(ch, "quit\n");
    if (ch->pi.hProcess) {
        if (WaitForSingleObject(ch->pi.hProcess, 10000) != WAIT_OBJECT_0)
            TerminateProcess(ch->pi.hProcess, 99);
        GetExitCodeProcess(ch->pi.hProcess, &code);
        CloseHandle(ch->pi.hProcess);
        CloseHandle(ch->pi.hThread);
    }
    CloseHandle(ch->in);
    CloseHandle(ch->out);
    memset(ch, 0, sizeof *ch);
    return code;
}

static int ends_with_ci(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && _stricmp(s + a - b, suffix) == 0;
}

static int is_wine(void)
{
    HMODULE nt = GetModuleHandleW(L"ntdll.dll");
    return nt && GetProcAddress(nt, "wine_get_version") != NULL;
}

/* The test program carries DWARF 4 (mingw GCC): wine's dbghelp reads it, Microsoft's does not
 * (it reads PDB files only; docs/windows.md#what-wine-does-and-does-not-do). On real Windows a
 * function of the test program that reads module!+0xOFF means that, and the case skips; under wine
 * it fails. */
static void dwarf_or_skip(const char *text)
{
    if (!text || !strstr(text, "!+0x") || is_wine())
        return;
    printf("SKIP: this dbghelp.dll does not read the test program's DWARF (%s): Microsoft's "
           "reads PDB only; verified under wine\n",
           text);
    fflush(stdout);
    exit(HT_TEST_SKIP);
}

/* ---- cases ---- */

static void test_procmem_commit(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    struct procmem a, b;
    CHECK_EQ(procmem_read(child_pid(&ch), &a), 0);
    CHECK(a.private_bytes > 0);
    CHECK(child_send(&ch, "commit 64\n") == 0);
    char line[64];
    CHECK(child_line(&ch, line, sizeof line) == 0);
    CHECK_STR(line, "ok");
    CHECK_EQ(procmem_read(child_pid(&ch), &b), 0);
    uint64_t delta = b.private_bytes - a.private_bytes;
    printf("private bytes %llu -> %llu (+%llu KiB)\n", (unsigned long long)a.private_bytes,
           (unsigned long long)b.private_bytes, (unsigned long long)(delta >> 10));
    CHECK(b.private_bytes > a.private_bytes);
    CHECK(delta >= (uint64_t)63 << 20 && delta < (uint64_t)96 << 20);
    CHECK_EQ(child_end(&ch), 7);
}

static void test_modules(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    struct procmods_module *v = NULL;
    size_t n = 0;
    CHECK_EQ(procmods_list(child_pid(&ch), &v, &n), 0);
    int exe = -1, ntdll = -1, k32 = -1;
    for (size_t i = 0; i < n; i++) {
        const char *b = procmods_basename(v[i].path);
        if (_stricmp(b, "ht-sym-child-win.exe") == 0)
            exe = (int)i;
        else if (_stricmp(b, "ntdll.dll") == 0)
            ntdll = (int)i;
        else if (_stricmp(b, "kernel32.dll") == 0)
            k32 = (int)i;
        printf("module %016llx +%llx %s\n", (unsigned long long)v[i].base,
               (unsigned long long)v[i].size, v[i].path);
    }
    uint64_t leaf = child_val(&ch, "ht_win_leaf");
    int ok = exe == 0 && ntdll >= 0 && k32 >= 0;
    ok = ok && v[exe].base == child_val(&ch, "exe_base") && v[exe].size >= 4096;
    ok = ok && v[ntdll].base == child_val(&ch, "ntdll_base") && v[ntdll].size >= 4096;
    ok = ok && v[k32].base == child_val(&ch, "kernel32_base") && v[k32].size >= 4096;
    ok = ok && leaf >= v[exe].base && leaf < v[exe].base + v[exe].size;
    ht_free(v);
    child_end(&ch);
    CHECK(ok);
    /* A pid that names no process. */
    CHECK_EQ(procmods_list(0xfffffff0u, &v, &n), UV_ENOENT);
    CHECK(v == NULL && n == 0);
}

static void test_resolve_own(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    struct mem_acct acct;
    mem_acct_init(&acct, NULL);
    struct sym_cache *c = NULL;
    CHECK_EQ(sym_cache_new(&c, child_pid(&ch), &acct, MEM_symbols), 0);
    char buf[512], file[512];
    unsigned line = 0;
    uint64_t leaf = child_val(&ch, "ht_win_leaf"), commit = child_val(&ch, "ht_win_commit");
    const char *t = sym_cache_resolve(c, leaf, 0, buf, sizeof buf);
    if (t && strstr(t, "!+0x") && !is_wine()) {
        sym_cache_free(c);
        child_end(&ch);
        dwarf_or_skip(t);
    }
    CHECK_STR(t, "ht-sym-child-win.exe!ht_win_leaf");
    /* A return address just past the start is looked up one byte back. */
    CHECK_STR(sym_cache_resolve(c, commit + 1, 1, buf, sizeof buf),
              "ht-sym-child-win.exe!ht_win_commit");
    CHECK_STR(sym_cache_resolve(c, commit + 4, 0, buf, sizeof buf),
              "ht-sym-child-win.exe!ht_win_commit");
    /* The PE header has no function: the module and the offset from its base. */
    uint64_t base = child_val(&ch, "exe_base");
    CHECK_STR(sym_cache_resolve(c, base + 0x10, 0, buf, sizeof buf), "ht-sym-child-win.exe!+0x10");
    /* An address in no module. */
    CHECK(sym_cache_resolve(c, 0x10000, 0, buf, sizeof buf) == NULL);
    CHECK_EQ(sym_cache_lineinfo(c, leaf, 0, file, sizeof file, &line), 0);
    printf("%s:%u\n", file, line);
    CHECK(ends_with_ci(file, "sym-child-win.c"));
    CHECK_EQ(line, child_val(&ch, "leaf_line"));
    CHECK_EQ(sym_cache_lineinfo(c, commit, 0, file, sizeof file, &line), 0);
    CHECK_EQ(line, child_val(&ch, "commit_line"));
    struct sym_stats st;
    sym_cache_stats(c, &st);
    printf("modules %llu symbols %llu lookups %llu misses %llu load_errors %llu bytes %llu\n",
           (unsigned long long)st.modules, (unsigned long long)st.symbols,
           (unsigned long long)st.lookups, (unsigned long long)st.misses,
           (unsigned long long)st.load_errors, (unsigned long long)st.bytes);
    CHECK_EQ(st.modules, 1);
    CHECK_EQ(st.lookups, 5);
    CHECK_EQ(st.misses, 2);
    CHECK_EQ(st.timeouts, 0);
    CHECK(st.symbols >= 4);
    /* Charged to the accounting, and given back. */
    CHECK(st.bytes > 0);
    CHECK_EQ(acct.bytes[MEM_symbols], st.bytes);
    /* Cached: the same answer without a new module load. */
    CHECK_STR(sym_cache_resolve(c, leaf, 0, buf, sizeof buf), "ht-sym-child-win.exe!ht_win_leaf");
    sym_cache_free(c);
    CHECK_EQ(acct.bytes[MEM_symbols], 0);
    mem_acct_close(&acct);
    child_end(&ch);
}

static void test_resolve_kernel32(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    struct sym_cache *c = NULL;
    CHECK_EQ(sym_cache_new(&c, child_pid(&ch), NULL, MEM_symbols), 0);
    char buf[512];
    const char *t = sym_cache_resolve(c, child_val(&ch, "k32_export"), 0, buf, sizeof buf);
    printf("kernel32 export: %s\n", t ? t : "(null)");
    CHECK(t != NULL);
    CHECK(_strnicmp(t, "kernel32.dll!", 13) == 0);
    CHECK_STR(t + 13, "GetProcessHeap");
    sym_cache_free(c);
    child_end(&ch);
}

/* add_module: the source names the module (an ETW image load), no list read. */
static void test_added_module(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    struct procmods_module *v = NULL;
    size_t n = 0;
    CHECK_EQ(procmods_list(child_pid(&ch), &v, &n), 0);
    CHECK(n > 0);
    struct sym_cache *c = NULL;
    CHECK_EQ(sym_cache_new(&c, child_pid(&ch), NULL, MEM_symbols), 0);
    CHECK_EQ(sym_cache_add_module(c, v[0].base, v[0].base + v[0].size, v[0].base, v[0].path, ""),
             0);
    CHECK_EQ(sym_cache_add_module(c, 10, 5, 0, "x.dll", ""), HT_EBADARG);
    char buf[512];
    const char *t = sym_cache_resolve(c, child_val(&ch, "ht_win_leaf"), 0, buf, sizeof buf);
    dwarf_or_skip(t);
    CHECK_STR(t, "ht-sym-child-win.exe!ht_win_leaf");
    /* Removed: the address is found again from the module list (a rescan). */
    sym_cache_remove_module(c, v[0].base);
    CHECK_STR(sym_cache_resolve(c, child_val(&ch, "ht_win_leaf"), 0, buf, sizeof buf),
              "ht-sym-child-win.exe!ht_win_leaf");
    ht_free(v);
    sym_cache_free(c);
    child_end(&ch);
}

/* A module of the list that a rescan cannot add (a module of the source's
 * lies inside it) is counted in modules_not_added, as on Linux. */
static void test_scan_not_added(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    struct procmods_module *v = NULL;
    size_t n = 0;
    CHECK_EQ(procmods_list(child_pid(&ch), &v, &n), 0);
    CHECK(n > 0 && v[0].size > 0x2000);
    struct sym_cache *c = NULL;
    CHECK_EQ(sym_cache_new(&c, child_pid(&ch), NULL, MEM_symbols), 0);
    CHECK_EQ(sym_cache_add_module(c, v[0].base + 0x1000, v[0].base + 0x2000, v[0].base,
                                  v[0].path, ""),
             0);
    char buf[512];
    /* An address in no module: the module list is read again. */
    CHECK(sym_cache_resolve(c, 0x10, 0, buf, sizeof buf) == NULL);
    struct sym_stats st;
    sym_cache_stats(c, &st);
    CHECK_EQ(st.modules_not_added, 1);
    ht_free(v);
    sym_cache_free(c);
    child_end(&ch);
}

struct exit_seen {
    int fired, known, code;
    uint64_t pid;
};

static void on_exit_cb(void *arg, uint64_t pid, int known, int code)
{
    struct exit_seen *e = arg;
    e->fired++;
    e->known = known;
    e->code = code;
    e->pid = pid;
}

static void on_timeout(uv_timer_t *t)
{
    uv_stop(t->loop);
}

/* The child exits: the watch fires on the loop with its exit code, private
 * bytes read UV_ENOENT, and the symbols of the gone process still resolve. */
static void test_exit_watch(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    uint64_t pid = child_pid(&ch);
    struct sym_cache *c = NULL;
    CHECK_EQ(sym_cache_new(&c, pid, NULL, MEM_symbols), 0);
    char buf[512];
    const char *before = sym_cache_resolve(c, child_val(&ch, "ht_win_leaf"), 0, buf, sizeof buf);
    CHECK(before != NULL);
    dwarf_or_skip(before);
    char saved[512];
    snprintf(saved, sizeof saved, "%s", before);
    struct procmods_module *mods = NULL;
    size_t nmods = 0;
    CHECK_EQ(procmods_list(pid, &mods, &nmods), 0);
    CHECK(nmods > 0);
    char exe_path[PROCMODS_PATH_MAX];
    snprintf(exe_path, sizeof exe_path, "%s", mods[0].path);
    ht_free(mods);

    uv_loop_t loop;
    CHECK_EQ(uv_loop_init(&loop), 0);
    struct exit_seen seen = {0};
    struct procwatch *w = NULL;
    CHECK_EQ(procwatch_start(&loop, pid, on_exit_cb, &seen, &w), 0);
    uv_timer_t timer;
    uv_timer_init(&loop, &timer);
    uv_timer_start(&timer, on_timeout, 10000, 0);
    /* Not yet: nothing fires while it runs. */
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK_EQ(seen.fired, 0);
    struct procmem m;
    CHECK_EQ(procmem_read(pid, &m), 0);
    /* Our own handle keeps the process object: procmem_read must still see it gone. */
    child_send(&ch, "quit\n");
    while (!seen.fired && uv_run(&loop, UV_RUN_ONCE))
        ;
    uv_timer_stop(&timer);
    CHECK_EQ(seen.fired, 1);
    CHECK_EQ(seen.pid, pid);
    CHECK(seen.known);
    CHECK_EQ(seen.code, 7);
    CHECK_EQ(procmem_read(pid, &m), UV_ENOENT);
    struct procmods_module *v = NULL;
    size_t n = 0;
    CHECK_EQ(procmods_list(pid, &v, &n), UV_ENOENT);
    CHECK_STR(sym_cache_resolve(c, child_val(&ch, "ht_win_leaf"), 0, buf, sizeof buf), saved);
    /* Not asked before the exit: DbgHelp still reads the module it loaded. */
    CHECK_STR(sym_cache_resolve(c, child_val(&ch, "ht_win_commit"), 0, buf, sizeof buf),
              "ht-sym-child-win.exe!ht_win_commit");
    /* A new cache after the exit: no module list to read, but a module the source names
     * (as ETW's image events do) resolves. */
    struct sym_cache *late = NULL;
    CHECK_EQ(sym_cache_new(&late, pid, NULL, MEM_symbols), 0);
    CHECK(sym_cache_resolve(late, child_val(&ch, "ht_win_leaf"), 0, buf, sizeof buf) == NULL);
    uint64_t base = child_val(&ch, "exe_base");
    CHECK_EQ(sym_cache_add_module(late, base, base + 0x10000, base, exe_path, ""), 0);
    const char *t = sym_cache_resolve(late, child_val(&ch, "ht_win_leaf"), 0, buf, sizeof buf);
    printf("after exit, new cache: %s\n", t ? t : "(null)");
    CHECK_STR(t, saved);
    sym_cache_free(late);
    procwatch_stop(w);
    uv_close((uv_handle_t *)&timer, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&loop), 0);
    sym_cache_free(c);
    child_end(&ch);
    /* A pid that names no process. */
    CHECK_EQ(procmem_read(0xfffffff0u, &m), UV_ENOENT);
    CHECK_EQ(uv_loop_init(&loop), 0);
    CHECK_EQ(procwatch_start(&loop, 0xfffffff0u, on_exit_cb, &seen, &w), UV_ENOENT);
    uv_loop_close(&loop);
}

/* A watch stopped before the exit never calls back. */
static void test_exit_watch_stopped(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    uv_loop_t loop;
    CHECK_EQ(uv_loop_init(&loop), 0);
    struct exit_seen seen = {0};
    struct procwatch *w = NULL;
    CHECK_EQ(procwatch_start(&loop, child_pid(&ch), on_exit_cb, &seen, &w), 0);
    procwatch_stop(w);
    CHECK_EQ(child_end(&ch), 7);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(seen.fired, 0);
    CHECK_EQ(uv_loop_close(&loop), 0);
}

/* Several threads, each with its own cache, resolve at once: DbgHelp serves them one at a time. */
struct worker_arg {
    uint64_t pid, addr;
    int ok;
};

static void worker(void *p)
{
    struct worker_arg *a = p;
    struct sym_cache *c = NULL;
    if (sym_cache_new(&c, a->pid, NULL, MEM_symbols) != 0)
        return;
    char buf[512];
    a->ok = 1;
    for (int i = 0; i < 200; i++) {
        const char *t = sym_cache_resolve(c, a->addr + (uint64_t)(i % 4), 0, buf, sizeof buf);
        if (!t || strcmp(t, "ht-sym-child-win.exe!ht_win_leaf") != 0)
            a->ok = 0;
    }
    sym_cache_free(c);
}

static void test_threads(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    struct sym_cache *c = NULL;
    CHECK_EQ(sym_cache_new(&c, child_pid(&ch), NULL, MEM_symbols), 0);
    char buf[512];
    const char *t = sym_cache_resolve(c, child_val(&ch, "ht_win_leaf"), 0, buf, sizeof buf);
    sym_cache_free(c);
    dwarf_or_skip(t);
    uv_thread_t th[4];
    struct worker_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct worker_arg){child_pid(&ch), child_val(&ch, "ht_win_leaf"), 0};
        CHECK_EQ(uv_thread_create(&th[i], worker, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        uv_thread_join(&th[i]);
    child_end(&ch);
    for (int i = 0; i < 4; i++)
        CHECK(args[i].ok);
}

static void test_search_path(void)
{
    CHECK_EQ(sym_set_search_path("C:\\nonexistent-symbols"), 0);
    /* Invalid UTF-8. */
    CHECK_EQ(sym_set_search_path("\xff\xfe"), HT_EBADARG);
    struct child ch;
    CHECK(child_start(&ch) == 0);
    struct sym_cache *c = NULL;
    CHECK_EQ(sym_cache_new(&c, child_pid(&ch), NULL, MEM_symbols), 0);
    char buf[512];
    /* The image carries its own DWARF: a search path that holds nothing changes no answer. */
    const char *t = sym_cache_resolve(c, child_val(&ch, "ht_win_leaf"), 0, buf, sizeof buf);
    sym_cache_free(c);
    child_end(&ch);
    CHECK_EQ(sym_set_search_path(NULL), 0);
    dwarf_or_skip(t);
    CHECK_STR(t, "ht-sym-child-win.exe!ht_win_leaf");
}

/* The DbgHelp thread answers late (test knobs): the lookup reads module!+0xOFF, counts a
 * timeout and is not cached; once the thread has caught up the same address resolves. */
static void test_timeout(void)
{
    struct child ch;
    CHECK(child_start(&ch) == 0);
    struct sym_cache *c = NULL;
    CHECK_EQ(sym_cache_new(&c, child_pid(&ch), NULL, MEM_symbols), 0);
    char buf[512];
    uint64_t leaf = child_val(&ch, "ht_win_leaf"), base = child_val(&ch, "exe_base");
    char late[64];
    snprintf(late, sizeof late, "ht-sym-child-win.exe!+0x%llx", (unsigned long long)(leaf - base));
    _putenv("HEAPTRACE_TEST_SYM_DELAY_MS=400");
    _putenv("HEAPTRACE_TEST_SYM_WAIT_MS=50");
    const char *t = sym_cache_resolve(c, leaf, 0, buf, sizeof buf);
    _putenv("HEAPTRACE_TEST_SYM_DELAY_MS=");
    _putenv("HEAPTRACE_TEST_SYM_WAIT_MS=");
    CHECK_STR(t, late);
    struct sym_stats st;
    sym_cache_stats(c, &st);
    CHECK_EQ(st.timeouts, 1);
    CHECK_EQ(st.misses, 1);
    CHECK_EQ(st.symbols, 0);
    /* The late request is still served (then freed by the DbgHelp thread); this one waits
     * behind it. */
    t = sym_cache_resolve(c, leaf, 0, buf, sizeof buf);
    dwarf_or_skip(t);
    CHECK_STR(t, "ht-sym-child-win.exe!ht_win_leaf");
    sym_cache_stats(c, &st);
    CHECK_EQ(st.timeouts, 1);
    CHECK_EQ(st.symbols, 1);
    sym_cache_free(c);
    child_end(&ch);
}

HT_TEST_MAIN(T(procmem_commit), T(modules), T(resolve_own), T(resolve_kernel32), T(added_module), T(scan_not_added),
             T(exit_watch), T(exit_watch_stopped), T(threads), T(search_path), T(timeout))

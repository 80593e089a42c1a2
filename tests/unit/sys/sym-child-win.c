/* The Windows test target (test-sys-win.c): prints the addresses of its own functions and of a
 * kernel32 export, then obeys commands read from stdin. Built with -gdwarf-4 (wine's dbghelp
 * reads DWARF 4, docs/windows.md#what-wine-does-and-does-not-do), -O1 and noinline functions with
 * known names. */
#include <stdio.h>
#include <string.h>
#include <windows.h>

/* Each function's first line, where its entry address maps: the line number and the function
 * on one line. */
/* clang-format off */
static const int leaf_line = __LINE__; __attribute__((noinline)) int ht_win_leaf(volatile int *x) { return *x + 1; }
static const int commit_line = __LINE__; __attribute__((noinline)) void *ht_win_commit(size_t n) {
    /* Committed and touched: private bytes (commit charge) grow by n. */
    char *p = VirtualAlloc(NULL, n, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    if (p)
        memset(p, 1, n);
    return p;
}
/* clang-format on */

static void put(const char *name, const void *addr)
{
    printf("%s %p\n", name, addr);
}

int main(void)
{
    char line[64];
    volatile int x = 1;
    ht_win_leaf(&x);
    HMODULE k32 = GetModuleHandleW(L"kernel32.dll");
    put("ht_win_leaf", (const void *)ht_win_leaf);
    put("ht_win_commit", (const void *)ht_win_commit);
    put("exe_base", GetModuleHandleW(NULL));
    put("kernel32_base", k32);
    put("ntdll_base", GetModuleHandleW(L"ntdll.dll"));
    /* An export kernel32 implements itself (not a forwarder to kernelbase or ntdll). */
    put("k32_export", (const void *)GetProcAddress(k32, "GetProcessHeap"));
    printf("leaf_line %d\ncommit_line %d\nready\n", leaf_line, commit_line);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        unsigned mib;
        if (sscanf(line, "commit %u", &mib) == 1) {
            void *p = ht_win_commit((size_t)mib << 20);
            printf("%s\n", p ? "ok" : "fail");
            fflush(stdout);
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        }
    }
    return 7;
}

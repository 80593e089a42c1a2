/* The x86-64 prologue decoder: synthetic shapes, this host's glibc, and the
 * sites the resolver picks in the installed libc.so.6 and libjemalloc.so.2. */
#define _GNU_SOURCE
#include "ht-test.h"
#include "prologue.h"
#include "resolve.h"

#include <uv.h>

#include <dlfcn.h>
#include <malloc.h>

static void test_synthetic(void)
{
    /* glibc free: test %rdi,%rdi; je -> the je at +3. */
    const uint8_t free_like[] = {0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0, 0, 0, 0x55};
    CHECK_EQ(prologue_probe_offset(free_like, sizeof(free_like)), 3);
    /* cmpb $0,x(%rip); push %r12 -> +7. */
    const uint8_t pm[] = {0x80, 0x3d, 0x01, 0x02, 0x14, 0x00, 0x00, 0x41, 0x54};
    CHECK_EQ(prologue_probe_offset(pm, sizeof(pm)), 7);
    /* endbr64; push %rbp -> +4. */
    const uint8_t cet[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5};
    CHECK_EQ(prologue_probe_offset(cet, sizeof(cet)), 4);
    /* push first: +0. */
    const uint8_t push[] = {0x41, 0x54, 0x55};
    CHECK_EQ(prologue_probe_offset(push, sizeof(push)), 0);
    /* mov %rsi,%rax (rax is no argument) then mul %rdx: the mul is neither
     * emulated nor harmless -> 0 (probe the entry). */
    const uint8_t ra[] = {0x48, 0x89, 0xf0, 0x48, 0xf7, 0xe2, 0x48, 0x89, 0xc6};
    CHECK_EQ(prologue_probe_offset(ra, sizeof(ra)), 0);
    /* mov %rsp,%rbp would be skippable by register, but rsp is written by
     * sub: sub $8,%rsp; push -> 0. */
    const uint8_t sub[] = {0x48, 0x83, 0xec, 0x08, 0x55};
    CHECK_EQ(prologue_probe_offset(sub, sizeof(sub)), 0);
    /* mov %rdi,%rsi overwrites an argument: stop -> 0. */
    const uint8_t clobber[] = {0x48, 0x89, 0xfe, 0x55};
    CHECK_EQ(prologue_probe_offset(clobber, sizeof(clobber)), 0);
    /* A shape cut short by the buffer. */
    CHECK_EQ(prologue_probe_offset(free_like, 3), 0);
    CHECK_EQ(prologue_probe_offset(free_like, 0), 0);
    unsigned len = 0;
    CHECK(prologue_emulated((const uint8_t[]){0x74, 0x10}, 2, &len) && len == 2);
    CHECK(!prologue_emulated((const uint8_t[]){0x48, 0x85, 0xff}, 3, &len));
}

/* Bytes of a libc function as this process maps it; skip when the symbol
 * is not glibc's own (a sanitizer's interceptor). */
static int libc_code(const char *name, const uint8_t **code)
{
    void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void *f = h ? dlsym(h, name) : NULL;
    Dl_info info;
    if (!f || !dladdr(f, &info) || !strstr(info.dli_fname, "libc.so")) {
        printf("skip: %s is not glibc's here\n", name);
        exit(HT_TEST_SKIP);
    }
    *code = f;
    return 0;
}

static void test_glibc_free(void)
{
    const uint8_t *c;
    libc_code("free", &c);
    unsigned off = prologue_probe_offset(c, PROLOGUE_SCAN), len;
    printf("free: %02x %02x %02x %02x -> +%u\n", c[0], c[1], c[2], c[3], off);
    if (c[0] == 0x48 && c[1] == 0x85 && c[2] == 0xff) /* glibc 2.36's shape (Debian 12) */
        CHECK_EQ(off, 3);
    CHECK(prologue_emulated(c + off, PROLOGUE_SCAN - off, &len) || off == 0);
}

static void test_glibc_memalign(void)
{
    const uint8_t *c;
    libc_code("memalign", &c);
    unsigned off = prologue_probe_offset(c, PROLOGUE_SCAN), len;
    printf("memalign: %02x %02x -> +%u\n", c[0], c[1], off);
    if (c[0] == 0x80 && c[1] == 0x3d) /* cmpb $0,__malloc_initialized(%rip) */
        CHECK_EQ(off, 7);
    CHECK(prologue_emulated(c + off, PROLOGUE_SCAN - off, &len) || off == 0);
}

/* Allocator shapes beyond glibc's: where the walk goes and why it stops. */
static void test_shapes(void)
{
    struct prologue_site s;
    /* jemalloc 5.3 malloc: cmp $0x1000,%rdi; ja -> the ja at +7. */
    const uint8_t je_malloc[] = {0x48, 0x81, 0xff, 0x00, 0x10, 0x00, 0x00, 0x0f, 0x87, 0x93, 0, 0, 0};
    prologue_site_find(je_malloc, sizeof(je_malloc), 1, &s);
    CHECK(s.emulated && s.off == 7);
    /* jemalloc 5.3 free: ten instructions writing rax rcx rdx and flags,
     * reading memory through %fs and rax, then jne at +0x30. rcx and rdx
     * are no arguments of free, but are of a function of six. */
    const uint8_t je_free[] = {
        0x48, 0x89, 0xf8,                                     /* mov %rdi,%rax */
        0x48, 0x8b, 0x15, 0x0e, 0x53, 0x0a, 0x00,             /* mov x(%rip),%rdx */
        0x48, 0x89, 0xf9,                                     /* mov %rdi,%rcx */
        0x48, 0xc1, 0xe8, 0x1a,                               /* shr $0x1a,%rax */
        0x48, 0x81, 0xe1, 0x00, 0x00, 0x00, 0xc0,             /* and $-0x40000000,%rcx */
        0x25, 0xf0, 0x00, 0x00, 0x00,                         /* and $0xf0,%eax */
        0x64, 0x48, 0x03, 0x04, 0x25, 0x00, 0x00, 0x00, 0x00, /* add %fs:0,%rax */
        0x48, 0x01, 0xd0,                                     /* add %rdx,%rax */
        0x48, 0x3b, 0x88, 0xb0, 0x01, 0x00, 0x00,             /* cmp 0x1b0(%rax),%rcx */
        0x0f, 0x85, 0x8a, 0x00, 0x00, 0x00,                   /* jne */
    };
    prologue_site_find(je_free, sizeof(je_free), 1, &s);
    CHECK(s.emulated && s.off == 0x30);
    prologue_site_find(je_free, sizeof(je_free), 6, &s);
    CHECK(!s.emulated && s.off == 0);
    printf("free of six arguments: %s\n", s.why);
    CHECK(strstr(s.why, "mov at +3 writes rdx") != NULL);
    /* A store stops the walk, even into a scratch register's memory. */
    const uint8_t store[] = {0x48, 0x89, 0x38, 0x74, 0x02}; /* mov %rdi,(%rax); je */
    prologue_site_find(store, sizeof(store), 1, &s);
    CHECK(!s.emulated && strstr(s.why, "writes memory"));
    /* An indirect jump is a branch the kernel does not emulate. */
    const uint8_t ind[] = {0xff, 0xe0, 0x90}; /* jmp *%rax */
    prologue_site_find(ind, sizeof(ind), 1, &s);
    CHECK(!s.emulated && strstr(s.why, "jmp at +0, a branch"));
    /* No branch within reach. */
    uint8_t flat[PROLOGUE_SCAN];
    for (size_t i = 0; i + 3 <= sizeof(flat); i += 3)
        memcpy(flat + i, (const uint8_t[]){0x48, 0x85, 0xff}, 3); /* test %rdi,%rdi */
    prologue_site_find(flat, sizeof(flat), 1, &s);
    CHECK(!s.emulated && strstr(s.why, "no emulated instruction in the first"));
    /* A 0x66-prefixed jcc is refused by the kernel; a 66 90 nop is emulated. */
    unsigned len;
    CHECK(!prologue_emulated((const uint8_t[]){0x66, 0x74, 0x02}, 3, &len));
    CHECK(prologue_emulated((const uint8_t[]){0x66, 0x90}, 2, &len) && len == 2);
    CHECK(!prologue_emulated((const uint8_t[]){0x41, 0x90}, 2, &len));
    /* endbr64 then cmp then jcc. */
    const uint8_t cet[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x85, 0xff, 0x74, 0x05};
    prologue_site_find(cet, sizeof(cet), 1, &s);
    CHECK(s.emulated && s.off == 7);
}

/* Every entry point the resolver would probe in an installed library sits
 * on an instruction the kernel emulates. */
static void library_sites(const char *path, int *found)
{
    static const char *const names[] = {
        "malloc",  "calloc",  "realloc", "reallocarray", "free",    "posix_memalign",
        "aligned_alloc", "memalign", "valloc", "pvalloc", "_Znwm", "_Znam",
        "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
        "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
        "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t", "strdup", "strndup", "getline",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct prologue_site s;
        uint64_t vaddr = 0;
        int rc = resolve_file_site(path, names[i], &vaddr, &s);
        if (rc == UV_ENOENT)
            continue;
        CHECK_EQ(rc, 0);
        printf("%s %s 0x%llx+%u %s %s\n", path, names[i], (unsigned long long)vaddr, s.off,
               s.emulated ? "emulated" : "single-stepped", s.why);
        /* glibc 2.36's reallocarray multiplies its arguments (mul %rdx)
         * before its first branch: no site keeps them, so it stays on its
         * entry, single-stepped, and says why. */
        if (strcmp(names[i], "reallocarray") == 0 && strstr(path, "libc.so")) {
            CHECK(s.emulated || strstr(s.why, "writes rdx"));
            continue;
        }
        CHECK(s.emulated);
        (*found)++;
    }
}

static void test_installed_libc(void)
{
    const char *p = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    if (access(p, R_OK) != 0) {
        printf("skip: no %s\n", p);
        exit(HT_TEST_SKIP);
    }
    int found = 0;
    library_sites(p, &found);
    CHECK(found >= 10);
}

static void test_installed_jemalloc(void)
{
    const char *p = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    if (access(p, R_OK) != 0) {
        printf("skip: no %s (libjemalloc2)\n", p);
        exit(HT_TEST_SKIP);
    }
    int found = 0;
    library_sites(p, &found);
    CHECK(found >= 10);
}

HT_TEST_MAIN(T(synthetic), T(glibc_free), T(glibc_memalign), T(shapes), T(installed_libc),
             T(installed_jemalloc))

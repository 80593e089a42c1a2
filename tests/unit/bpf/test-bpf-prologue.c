/* The x86-64 prologue decoder: synthetic shapes and this host's glibc. */
#define _GNU_SOURCE
#include "ht-test.h"
#include "prologue.h"

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

HT_TEST_MAIN(T(synthetic), T(glibc_free), T(glibc_memalign))

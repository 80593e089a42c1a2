/* fpcheck: frame pointers read from modules' CFI, on binaries built with and
 * without them, and on this host's libc (Debian builds it without). */
#define _GNU_SOURCE
#include "fpcheck.h"
#include "ht-test.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

static int check_file(const char *path, struct fpcheck *f)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        printf("FAIL: cannot open %s\n", path);
        exit(1);
    }
    int rc = fpcheck_fd(fd, f);
    close(fd);
    return rc;
}

static void test_with_fp(void)
{
    struct fpcheck f;
    CHECK_EQ(check_file(FP_SUBJECT, &f), 0); /* -O2 -fno-omit-frame-pointer */
    printf("sampled %u, rbp-based %u\n", f.sampled, f.rbp);
    CHECK(f.sampled >= 20);
    CHECK(fpcheck_has_fp(&f));
}

static void test_without_fp(void)
{
    struct fpcheck f;
    CHECK_EQ(check_file(NOFP_SUBJECT, &f), 0); /* -O2 -fomit-frame-pointer */
    printf("sampled %u, rbp-based %u\n", f.sampled, f.rbp);
    CHECK(f.sampled >= 20);
    CHECK(!fpcheck_has_fp(&f));
}

static int libc_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    if (strstr(info->dlpi_name, "/libc.so.6")) {
        snprintf(arg, 4096, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

/* Debian's libc has no frame pointers (the check says so, from .dynsym). */
static void test_libc(void)
{
    char path[4096] = "";
    dl_iterate_phdr(libc_cb, path);
    if (!path[0]) {
        printf("skip: no libc.so.6 in this process\n");
        exit(77);
    }
    struct fpcheck f;
    CHECK_EQ(check_file(path, &f), 0);
    printf("sampled %u, rbp-based %u\n", f.sampled, f.rbp);
    CHECK(f.sampled >= 100);
    CHECK(!fpcheck_has_fp(&f));
}

/* Not ELF: cannot tell. */
static void test_no_code(void)
{
    struct fpcheck f;
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(fpcheck_fd(fd, &f) != 0);
    CHECK(!fpcheck_has_fp(&f));
    close(fd);
}

HT_TEST_MAIN(T(with_fp), T(without_fp), T(libc), T(no_code))

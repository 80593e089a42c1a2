/* A minimal test harness: one program per area, one CTest test per case (ctest -R works). */
#ifndef HT_TEST_H
#define HT_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HT_TEST_SKIP 77

extern int ht_test_failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            ht_test_failed = 1;                                                                    \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        uint64_t va_ = (uint64_t)(a), vb_ = (uint64_t)(b);                                         \
        if (va_ != vb_) {                                                                          \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%" PRIu64 " vs %" PRIu64 ")\n",     \
                    __FILE__, __LINE__, #a, #b, va_, vb_);                                         \
            ht_test_failed = 1;                                                                    \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *sa_ = (a), *sb_ = (b);                                                         \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0) {                                               \
            fprintf(stderr, "%s:%d: CHECK_STR failed: \"%s\" vs \"%s\"\n", __FILE__, __LINE__,     \
                    sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                                   \
            ht_test_failed = 1;                                                                    \
            return;                                                                                \
        }                                                                                          \
    } while (0)

struct ht_test_case {
    const char *name;
    void (*fn)(void);
};

#define T(name)                                                                                    \
    {                                                                                              \
#name, test_##name                                                                         \
    }

static inline int ht_test_run(const struct ht_test_case *cases, size_t n, int argc, char **argv)
{
    int ran = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
            continue;
        ht_test_failed = 0;
        cases[i].fn();
        ran++;
        if (ht_test_failed) {
            failed++;
            fprintf(stderr, "FAIL %s\n", cases[i].name);
        } else if (ht_test_failed == 0) {
            printf("ok %s\n", cases[i].name);
        }
    }
    if (ran == 0) {
        fprintf(stderr, "no test case named %s\n", argc > 1 ? argv[1] : "(any)");
        return 2;
    }
    return failed ? 1 : 0;
}

#define HT_TEST_MAIN(...)                                                                          \
    int ht_test_failed;                                                                            \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        static const struct ht_test_case cases_[] = {__VA_ARGS__};                                 \
        return ht_test_run(cases_, sizeof(cases_) / sizeof(cases_[0]), argc, argv);                \
    }

#endif

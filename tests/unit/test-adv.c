/* Adversarial review of issue 8: hostile configuration values. */
#include "config.h"
#include "ht-error.h"
#include "ht-test.h"
#include "mem-acct.h"
#include "modnames.h"
#include "stack-intern.h"

#include <unistd.h>

/* config_load on text; the error message in err. */
static int load_text(const char *text, struct ht_config *cfg, char *err, size_t errsz)
{
    char path[] = "/tmp/ht-test-adv-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    config_defaults(cfg);
    err[0] = '\0';
    int rc = n == (ssize_t)strlen(text) ? config_load(cfg, path, err, errsz) : -1;
    unlink(path);
    if (rc != 0)
        config_free(cfg);
    return rc;
}

static void test_config_hostile(void)
{
    struct ht_config cfg;
    char err[256];
    /* 0 was accepted: the daemon came up and closed every client at its
     * first reply ("the daemon closed the connection"). */
    CHECK_EQ(load_text("{\"client_output_cap\":0}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "client_output_cap must be at least 65536") != NULL);
    CHECK_EQ(load_text("{\"client_output_cap\":\"65535\"}", &cfg, err, sizeof(err)), HT_EBADARG);
    /* 1e300 does not fit 64 bits (undefined behaviour before: read as 0). */
    CHECK_EQ(load_text("{\"client_output_cap\":1e300}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "\"client_output_cap\" has a bad value") != NULL);
    CHECK_EQ(load_text("{\"session_memory_budget\":18446744073709551616}", &cfg, err, sizeof(err)),
             HT_EBADARG);
    /* 1 ns samples with a ring of 1e8 froze the loop for minutes on the
     * 30 s demo (ping unanswered). */
    CHECK_EQ(load_text("{\"timeline_interval\":\"1ns\"}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "timeline_interval must be at least 1ms") != NULL);
    CHECK_EQ(load_text("{\"limits\":{\"timeline_ring\":100000000}}", &cfg, err, sizeof(err)),
             HT_EBADARG);
    /* The limits themselves are accepted. */
    CHECK_EQ(load_text("{\"client_output_cap\":65536,\"timeline_interval\":\"1ms\","
                       "\"limits\":{\"timeline_ring\":16777216}}",
                       &cfg, err, sizeof(err)),
             0);
    CHECK_EQ(cfg.client_output_cap, 65536);
    CHECK_EQ(cfg.limits.timeline_ns, 1000000);
    CHECK_EQ(cfg.limits.timeline_ring, 16777216);
    config_free(&cfg);
    CHECK_EQ(load_text("{\"client_output_cap\":\"16m\"}", &cfg, err, sizeof(err)), 0);
    CHECK_EQ(cfg.client_output_cap, 16u << 20);
    config_free(&cfg);
}

/* Module names for replays at their cap (modnames.h): an unloaded module
 * keeps naming its frames, and makes room for a new load when full; with
 * none unloaded a load past the cap is counted in drops. */
static void test_modnames_unload_cap(void)
{
    struct mem_acct acct;
    mem_acct_init(&acct, NULL);
    struct stack_intern si;
    CHECK_EQ(stack_intern_init(&si, 1024, 2 * MODNAMES_MAX), 0);
    struct modnames m;
    CHECK_EQ(modnames_init(&m, &acct), 0);
    char path[64], buf[128];
    for (unsigned i = 0; i < MODNAMES_MAX; i++) {
        int n = snprintf(path, sizeof(path), "/lib/m%u.so", i);
        struct ht_event ev = {.t = i,
                              .kind = HT_EV_MODULE_LOAD,
                              .addr = 0x100000 + (uint64_t)i * 0x1000,
                              .size = 0x1000,
                              .old_addr = 0x100000 + (uint64_t)i * 0x1000,
                              .heap = stack_intern_str(&si, path, (unsigned)n)};
        modnames_apply(&m, &si, &ev, 1);
    }
    CHECK_EQ(m.n, MODNAMES_MAX);
    CHECK_EQ(m.drops, 0);
    /* Full, nothing unloaded: a load is dropped. */
    struct ht_event ev = {.kind = HT_EV_MODULE_LOAD,
                          .addr = 0x90000000,
                          .size = 0x1000,
                          .heap = stack_intern_str(&si, "/lib/new.so", 11)};
    modnames_apply(&m, &si, &ev, 1);
    CHECK_EQ(m.drops, 1);
    /* Unloaded: still named. */
    struct ht_event un = {.kind = HT_EV_MODULE_UNLOAD, .addr = 0x100000 + 7 * 0x1000};
    modnames_apply(&m, &si, &un, 1);
    CHECK_STR(modnames_text(&m, 0x100000 + 7 * 0x1000 + 0x10, buf, sizeof(buf)), "m7.so!+0x10");
    un.addr = 0x100000 + 3 * 0x1000;
    modnames_apply(&m, &si, &un, 1);
    un.addr = 0x100000 + 3 * 0x1000; /* twice: still the first unload's order */
    modnames_apply(&m, &si, &un, 1);
    /* Full: the one unloaded first (m7) makes room. */
    modnames_apply(&m, &si, &ev, 1);
    CHECK_EQ(m.drops, 1);
    CHECK_EQ(m.n, MODNAMES_MAX);
    CHECK_STR(modnames_text(&m, 0x90000010, buf, sizeof(buf)), "new.so!+0x90000010");
    CHECK(modnames_text(&m, 0x100000 + 7 * 0x1000 + 0x10, buf, sizeof(buf)) == NULL);
    CHECK_STR(modnames_text(&m, 0x100000 + 3 * 0x1000, buf, sizeof(buf)), "m3.so!+0x0");
    modnames_close(&m);
    stack_intern_close(&si);
    mem_acct_close(&acct);
}

HT_TEST_MAIN(T(config_hostile), T(modnames_unload_cap))

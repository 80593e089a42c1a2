/* Adversarial review of issue 8: hostile configuration values. */
#include "config.h"
#include "ht-error.h"
#include "ht-test.h"

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

HT_TEST_MAIN(T(config_hostile))

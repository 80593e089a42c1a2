/* The configuration list (daemon/config.def): parsing, ranges, unknown keys, defaults. */
#include "config.h"
#include "ht-error.h"
#include "ht-test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* config_load on text after config_defaults; the error message in err. */
static int load_text(const char *text, struct ht_config *cfg, char *err, size_t errsz)
{
    char path[] = "/tmp/ht-test-config-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    config_defaults(cfg);
    err[0] = '\0';
    int rc = n == (ssize_t)strlen(text) ? config_load(cfg, path, err, errsz) : -1;
    unlink(path);
    config_free(cfg);
    return rc;
}

/* A misspelt key was ignored: the daemon ran on the default the user meant
 * to change. Now it is refused, by name, at any depth; '_' keys are comments. */
static void test_unknown_key(void)
{
    struct ht_config cfg;
    char err[256];
    CHECK_EQ(load_text("{\"max_session\": 2}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "unknown key \"max_session\"") != NULL);
    CHECK_EQ(
        load_text("{\"limits\": {\"table_cap\": 5, \"life-ring\": 4}}", &cfg, err, sizeof(err)),
        HT_EBADARG);
    CHECK(strstr(err, "unknown key \"limits.life-ring\"") != NULL);
    CHECK_EQ(load_text("{\"limits\": 3}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "\"limits\" must be an object") != NULL);
    CHECK_EQ(load_text("{\"_comment\": \"x\", \"limits\": {\"_why\": 1}}", &cfg, err, sizeof(err)),
             0);
}

/* Range errors name the key and the range, in the key's units. */
static void test_ranges(void)
{
    struct ht_config cfg;
    char err[256];
    CHECK_EQ(load_text("{\"max_sessions\": 0}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "max_sessions must be between 1 and 4294967295") != NULL);
    CHECK_EQ(load_text("{\"max_sessions\": 4294967296}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK_EQ(load_text("{\"limits\": {\"max_stacks\": 1073741824}}", &cfg, err, sizeof(err)),
             HT_EBADARG);
    CHECK(strstr(err, "limits.max_stacks must be between 1 and 1073741823") != NULL);
    CHECK_EQ(load_text("{\"bpf_ring_bytes\": \"32KiB\"}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "bpf_ring_bytes must be between 65536 and 1073741824 bytes") != NULL);
    CHECK_EQ(load_text("{\"bpf_ring_bytes\": \"96KiB\"}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "power of two") != NULL);
    CHECK_EQ(load_text("{\"client_idle_timeout\": \"500us\"}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "client_idle_timeout must be at least 1ms") != NULL);
    CHECK_EQ(load_text("{\"limits\": {\"life_ring\": 0}}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "limits.life_ring must be at least 1") != NULL);
    CHECK_EQ(load_text("{\"max_sessions\": \"16\"}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "\"max_sessions\" has a bad value") != NULL);
    CHECK_EQ(load_text("{\"log_level\": \"loud\"}", &cfg, err, sizeof(err)), HT_EBADARG);
    CHECK(strstr(err, "log_level must be error, warn, info or debug") != NULL);
    CHECK_EQ(load_text("{\"max_clients\": 8, \"root_clients\": 8}", &cfg, err, sizeof(err)),
             HT_EBADARG);
    CHECK(strstr(err, "root_clients must be below max_clients") != NULL);
}

/* Values land in their fields, 32- and 64-bit alike. */
static void test_values(void)
{
    struct ht_config cfg;
    char err[256];
    char path[] = "/tmp/ht-test-config-XXXXXX";
    int fd = mkstemp(path);
    const char *text = "{\"max_sessions\": 3, \"root_clients\": 0, \"client_idle_timeout\": \"2s\","
                       "\"session_memory_budget\": \"5GiB\", \"debuginfod\": true,"
                       "\"log_level\": \"debug\", \"endpoint\": \"/tmp/x.sock\","
                       "\"limits\": {\"table_cap\": 7, \"life_ring\": 5000000000}}";
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    config_defaults(&cfg);
    CHECK_EQ(config_load(&cfg, path, err, sizeof(err)), 0);
    unlink(path);
    CHECK_EQ(cfg.max_sessions, 3);
    CHECK_EQ(cfg.max_clients, 256);
    CHECK_EQ(cfg.root_clients, 0);
    CHECK_EQ(cfg.client_idle_ns, 2000000000ull);
    CHECK_EQ(cfg.session_memory_budget, 5ull << 30);
    CHECK_EQ(cfg.debuginfod, 1);
    CHECK_EQ(cfg.log_level, LOG_DEBUG);
    CHECK(strcmp(cfg.endpoint, "/tmp/x.sock") == 0);
    CHECK_EQ(cfg.limits.table_cap, 7);
    CHECK_EQ(cfg.limits.commit_cap, 1u << 20);
    CHECK_EQ(cfg.limits.life_ring, 5000000000ull);
    config_free(&cfg);
}

/* The list's defaults are the engine's own limits, and the shipped example
 * (config/heaptraced.json, "the values here are the built-in defaults")
 * loads and changes nothing. */
static void test_defaults(void)
{
    struct ht_config def, cfg;
    struct engine_limits lim;
    char err[256];
    engine_limits_default(&lim);
    config_defaults(&def);
    CHECK(memcmp(&def.limits, &lim, sizeof(lim)) == 0);
    config_defaults(&cfg);
    CHECK_EQ(config_load(&cfg, HT_SOURCE_DIR "/config/heaptraced.json", err, sizeof(err)), 0);
    if (err[0])
        fprintf(stderr, "%s\n", err);
    CHECK_EQ(cfg.ncull, def.ncull);
    config_free(&cfg);
    config_free(&def);
#ifdef _WIN32
    /* The example names the Unix socket; Windows' default is its pipe. */
    memcpy(cfg.endpoint, def.endpoint, sizeof(cfg.endpoint));
#endif
    /* The cull lists are pointers: compared apart, the rest byte for byte. */
    def.cull = cfg.cull = NULL;
    def.cull_pats = cfg.cull_pats = NULL;
    CHECK(memcmp(&def, &cfg, sizeof(def)) == 0);
}

HT_TEST_MAIN(T(unknown_key), T(ranges), T(values), T(defaults))

/* The pprof builder (daemon/export/pprof.c): what it writes, gunzipped and
 * decoded with protobuf-c's own unpacker, field by field. */
#include "export.h"
#include "ht-alloc.h"
#include "ht-error.h"
#include "ht-test.h"
#include "pprof.h"
#include "profile.pb-c.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef Perftools__Profiles__Profile pb_profile;

/* CHECK for the helpers that return a value: a failure ends the test run. */
#define NEED(cond)                                                                                 \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: NEED failed: %s\n", __FILE__, __LINE__, #cond);                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static pb_profile *decode(struct pprof *p, int64_t t, int64_t d)
{
    uint8_t *gz = NULL, *raw = NULL;
    size_t ngz = 0, nraw = 0;
    NEED(pprof_write(p, t, d, &gz, &ngz) == 0);
    NEED(ngz > 18 && gz[0] == 0x1f && gz[1] == 0x8b); /* RFC 1952's magic */
    NEED(pprof_gunzip(gz, ngz, &raw, &nraw) == 0);
    pb_profile *pr = perftools__profiles__profile__unpack(NULL, nraw, raw);
    NEED(pr != NULL);
    ht_free(gz);
    ht_free(raw);
    return pr;
}

static const char *str(const pb_profile *pr, int64_t i)
{
    NEED(i >= 0 && (size_t)i < pr->n_string_table);
    return pr->string_table[i];
}

static const Perftools__Profiles__Location *loc(const pb_profile *pr, uint64_t id)
{
    NEED(id >= 1 && id <= pr->n_location);
    NEED(pr->location[id - 1]->id == id); /* ids are 1-based and dense */
    return pr->location[id - 1];
}

static const char *loc_func(const pb_profile *pr, uint64_t id)
{
    const Perftools__Profiles__Location *l = loc(pr, id);
    if (l->n_line == 0)
        return NULL;
    NEED(l->n_line == 1);
    uint64_t f = l->line[0]->function_id;
    NEED(f >= 1 && f <= pr->n_function);
    NEED(pr->function[f - 1]->id == f);
    return str(pr, pr->function[f - 1]->name);
}

/* Two mappings, three samples sharing frames: every field read back. */
static void test_fields(void)
{
    struct pprof *p = pprof_new();
    CHECK(p != NULL);
    CHECK_EQ(pprof_mapping(p, 0x1000, 0x5000, 0x0, "/usr/bin/app", "abcd01"), 0);
    CHECK_EQ(pprof_mapping(p, 0x7f0000, 0x7f8000, 0x2000, "/lib/libc.so.6", NULL), 0);
    struct pprof_frame a[] = {{0x7f0100, 1, "libc.so.6!malloc", NULL},
                              {0x1234, 1, "app!leak", "app.c"},
                              {0x9999999, 1, NULL, NULL}};
    struct pprof_frame b[] = {{0x7f0100, 1, "libc.so.6!malloc", NULL}, {0, 0, "app!named", NULL}};
    int64_t va[PPROF_NVALUES] = {3, 96, 1, 32}, vb[PPROF_NVALUES] = {1, 8, 0, 0};
    CHECK_EQ(pprof_sample(p, a, 3, va), 0);
    CHECK_EQ(pprof_sample(p, a, 3, va), 0);
    CHECK_EQ(pprof_sample(p, b, 2, vb), 0);
    CHECK_EQ(pprof_sample(p, b, 2, vb), 0);
    CHECK_EQ(pprof_unmapped(p), 1); /* 0x9999999, once however often it is seen */
    pb_profile *pr = decode(p, 1700000000123456789LL, 2500000000LL);
    pprof_free(p);

    CHECK(pr->n_string_table > 0 && strcmp(pr->string_table[0], "") == 0);
    static const char *const types[4][2] = {{"alloc_objects", "count"},
                                            {"alloc_space", "bytes"},
                                            {"inuse_objects", "count"},
                                            {"inuse_space", "bytes"}};
    CHECK_EQ(pr->n_sample_type, 4);
    for (int k = 0; k < 4; k++) {
        CHECK(strcmp(str(pr, pr->sample_type[k]->type), types[k][0]) == 0);
        CHECK(strcmp(str(pr, pr->sample_type[k]->unit), types[k][1]) == 0);
    }
    CHECK(strcmp(str(pr, pr->default_sample_type), "inuse_space") == 0);
    CHECK(pr->period_type && strcmp(str(pr, pr->period_type->type), "space") == 0);
    CHECK_EQ(pr->time_nanos, 1700000000123456789LL);
    CHECK_EQ(pr->duration_nanos, 2500000000LL);

    CHECK_EQ(pr->n_mapping, 2);
    CHECK_EQ(pr->mapping[0]->id, 1);
    CHECK_EQ(pr->mapping[0]->memory_start, 0x1000);
    CHECK_EQ(pr->mapping[0]->memory_limit, 0x5000);
    CHECK_EQ(pr->mapping[0]->file_offset, 0);
    CHECK(strcmp(str(pr, pr->mapping[0]->filename), "/usr/bin/app") == 0);
    CHECK(strcmp(str(pr, pr->mapping[0]->build_id), "abcd01") == 0);
    CHECK_EQ(pr->mapping[1]->id, 2);
    CHECK_EQ(pr->mapping[1]->file_offset, 0x2000);
    CHECK(strcmp(str(pr, pr->mapping[1]->build_id), "") == 0);

    /* malloc's address is one location in both stacks; the unnamed
     * address has no line; the name-only frame no address nor mapping. */
    CHECK_EQ(pr->n_sample, 4);
    CHECK_EQ(pr->n_location, 4);
    CHECK_EQ(pr->n_function, 3);
    const Perftools__Profiles__Sample *s0 = pr->sample[0], *s1 = pr->sample[2];
    CHECK_EQ(s0->n_location_id, 3);
    CHECK_EQ(s0->n_value, 4);
    for (int k = 0; k < 4; k++)
        CHECK_EQ(s0->value[k], va[k]);
    CHECK_EQ(s1->location_id[0], s0->location_id[0]);
    CHECK_EQ(pr->sample[3]->location_id[1], s1->location_id[1]);
    CHECK_EQ(pr->sample[1]->location_id[2], s0->location_id[2]);
    CHECK_EQ(s1->value[1], 8);
    const Perftools__Profiles__Location *l = loc(pr, s0->location_id[0]);
    CHECK_EQ(l->address, 0x7f0100);
    CHECK_EQ(l->mapping_id, 2);
    CHECK(strcmp(loc_func(pr, s0->location_id[0]), "libc.so.6!malloc") == 0);
    l = loc(pr, s0->location_id[1]);
    CHECK_EQ(l->address, 0x1234);
    CHECK_EQ(l->mapping_id, 1);
    CHECK(strcmp(loc_func(pr, s0->location_id[1]), "app!leak") == 0);
    uint64_t f = l->line[0]->function_id;
    CHECK(strcmp(str(pr, pr->function[f - 1]->filename), "app.c") == 0);
    CHECK(strcmp(str(pr, pr->function[f - 1]->system_name), "app!leak") == 0);
    l = loc(pr, s0->location_id[2]);
    CHECK_EQ(l->address, 0x9999999);
    CHECK_EQ(l->mapping_id, 0); /* no module holds it */
    CHECK(loc_func(pr, s0->location_id[2]) == NULL);
    l = loc(pr, s1->location_id[1]);
    CHECK_EQ(l->address, 0);
    CHECK_EQ(l->mapping_id, 0);
    CHECK(strcmp(loc_func(pr, s1->location_id[1]), "app!named") == 0);
    perftools__profiles__profile__free_unpacked(pr, NULL);
}

/* No rows: a valid profile with its sample types and nothing else. */
static void test_empty(void)
{
    cJSON *rows = cJSON_CreateArray();
    struct pprof *p;
    CHECK_EQ(export_pprof_json(rows, &p), 0);
    pb_profile *pr = decode(p, 0, 0);
    pprof_free(p);
    CHECK_EQ(pr->n_sample, 0);
    CHECK_EQ(pr->n_location, 0);
    CHECK_EQ(pr->n_sample_type, 4);
    CHECK(strcmp(pr->string_table[0], "") == 0);
    perftools__profiles__profile__free_unpacked(pr, NULL);
    cJSON_Delete(rows);
}

/* A snapshot's rows (names only): functions named as stacks names them
 * ("module!symbol", the offset into it dropped), values from the row. */
static void test_json_rows(void)
{
    cJSON *rows = cJSON_Parse("[{\"frames\":[\"libc.so.6!malloc+0x10\",\"app!main\"],"
                              "\"count\":4,\"size\":64,\"outstanding_count\":2,"
                              "\"outstanding\":32},{\"frames\":[\"app!+0x40\"],\"count\":1,"
                              "\"size\":8,\"outstanding_count\":0,\"outstanding\":0}]");
    struct pprof *p;
    CHECK_EQ(export_pprof_json(rows, &p), 0);
    pb_profile *pr = decode(p, 5, 6);
    pprof_free(p);
    CHECK_EQ(pr->n_sample, 2);
    CHECK_EQ(pr->sample[0]->value[0], 4);
    CHECK_EQ(pr->sample[0]->value[1], 64);
    CHECK_EQ(pr->sample[0]->value[2], 2);
    CHECK_EQ(pr->sample[0]->value[3], 32);
    CHECK(strcmp(loc_func(pr, pr->sample[0]->location_id[0]), "libc.so.6!malloc") == 0);
    CHECK(strcmp(loc_func(pr, pr->sample[0]->location_id[1]), "app!main") == 0);
    CHECK(strcmp(loc_func(pr, pr->sample[1]->location_id[0]), "app!+0x40") == 0);
    perftools__profiles__profile__free_unpacked(pr, NULL);
    cJSON_Delete(rows);
}

/* A budget: samples are taken while they fit, the first that does not is
 * refused with HT_EFULL (not HT_ENOMEM) and nothing past the cap is
 * counted; the same profile under no cap is written, its bytes counted. */
static void test_budget(void)
{
    struct pprof *p = pprof_new(), *free_p = pprof_new();
    NEED(p && free_p);
    pprof_budget(p, 64 * 1024, NULL);
    char name[64];
    int rc = 0;
    unsigned taken = 0;
    for (unsigned i = 0; i < 10000 && rc == 0; i++) {
        snprintf(name, sizeof(name), "app!site%u", i);
        struct pprof_frame f[2] = {{0x1000 + 16 * i, 1, name, NULL}, {0x10, 1, "app!main", NULL}};
        int64_t v[PPROF_NVALUES] = {1, 16, 1, 16};
        rc = pprof_sample(p, f, 2, v);
        taken += rc == 0;
        CHECK_EQ(pprof_sample(free_p, f, 2, v), 0);
    }
    CHECK_EQ(rc, HT_EFULL);
    CHECK(taken > 10 && taken < 10000);
    CHECK(pprof_used(p) <= 64 * 1024);
    CHECK_EQ(pprof_charge(p, 64 * 1024), HT_EFULL);
    uint8_t *gz = NULL;
    size_t n = 0;
    CHECK_EQ(pprof_write(free_p, 0, 0, &gz, &n), 0);
    CHECK(pprof_used(free_p) > 64 * 1024 && n > 0);
    ht_free(gz);
    pprof_free(p);
    pprof_free(free_p);
}

/* Profiles sharing a pool: the cap is theirs together (two query workers making two
 * at once took twice it), and what one held is given back when it is freed. */
static void test_budget_pool(void)
{
    _Atomic uint64_t pool = 0;
    struct pprof *a = pprof_new(), *b = pprof_new();
    NEED(a && b);
    uint64_t base = pprof_used(a) + pprof_used(b); /* pprof_new's own tables */
    pprof_budget(a, 100000 + base, &pool);
    pprof_budget(b, 100000 + base, &pool);
    CHECK_EQ((uint64_t)atomic_load(&pool), base);
    CHECK_EQ(pprof_charge(a, 60000), 0);
    CHECK_EQ(pprof_charge(b, 60000), HT_EFULL); /* alone it would fit */
    CHECK_EQ(pprof_charge(b, 30000), 0);
    CHECK_EQ((uint64_t)atomic_load(&pool), base + 90000);
    pprof_free(a);
    CHECK_EQ((uint64_t)atomic_load(&pool), pprof_used(b));
    CHECK_EQ(pprof_charge(b, 60000), 0);
    pprof_free(b);
    CHECK_EQ((uint64_t)atomic_load(&pool), 0);
}

HT_TEST_MAIN(T(fields), T(empty), T(json_rows), T(budget), T(budget_pool))

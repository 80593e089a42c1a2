/* Fuzz target: a request line through parsing, the command table's generic
 * validation, and the query-argument parser of a real session. */
#include "config.h"
#include "ht-commands.h"
#include "ht-proto.h"
#include "query-args.h"
#include "commands.h"
#include "session-int.h" /* the test reads the session's fields */

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static struct session *fuzz_session(struct ht_config *cfg)
{
    static struct session s;
    static int ready;
    if (!ready) {
        config_defaults(cfg);
        engine_init(&s.eng, &cfg->limits);
        engine_mark(&s.eng, "m1", 5);
        struct ht_event ev = {.kind = HT_EV_ALLOC, .t = 100, .addr = 0x10, .size = 8};
        engine_apply(&s.eng, &ev);
        ready = 1;
    }
    return &s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ht_config cfg;
    struct session *s = fuzz_session(&cfg);
    if (size > HT_REQUEST_MAX)
        return 0;
    struct ht_request req;
    char err[256];
    if (ht_request_parse((const char *)data, size, &req, err, sizeof(err)) == 0) {
        const struct ht_cmd_spec *cmd = ht_cmd_find(req.cmd);
        if (cmd && ht_args_validate(cmd, req.args, err, sizeof(err)) == 0 &&
            (cmd->id == HT_CMD_STACKS || cmd->id == HT_CMD_COMMITS)) {
            struct qargs *qa = malloc(sizeof(*qa));
            if (qa && qargs_parse(qa, s, &cfg, req.args, cmd->id == HT_CMD_COMMITS, err,
                                  sizeof(err)) == 0) {
                struct query_result res;
                if (engine_query(&s->eng, &qa->q, &res) == 0)
                    query_result_free(&res);
            }
            free(qa);
        }
        const cJSON *range = cJSON_GetObjectItemCaseSensitive(req.args, "range");
        uint64_t t1, t2;
        if (cJSON_IsString(range))
            range_parse(s, range->valuestring, &t1, &t2, err, sizeof(err));
    }
    ht_request_free(&req);
    return 0;
}

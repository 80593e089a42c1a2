/* The command table as arrays, and the generic argument checks done before any handler. */
#include "ht-commands.h"

#include "ht-error.h"
#include "ht-units.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const struct ht_cmd_spec ht_cmds[HT_CMD_COUNT] = {
#define HT_CMD(id, name, flags, syn, sum, handler, renderer) {HT_CMD_##id, name, flags, syn, sum},
#define HT_ARG(id, name, type, flags, meta, help)
#include "ht-commands.def"
#undef HT_CMD
#undef HT_ARG
};

const struct ht_arg_spec ht_args[] = {
#define HT_CMD(id, name, flags, syn, sum, handler, renderer)
#define HT_ARG(id, name, type, flags, meta, help) {HT_CMD_##id, name, type, flags, meta, help},
#include "ht-commands.def"
#undef HT_CMD
#undef HT_ARG
};

const size_t ht_nargs = sizeof(ht_args) / sizeof(ht_args[0]);

const struct ht_arg_range ht_arg_ranges[] = {
#define HT_CMD(id, name, flags, syn, sum, handler, renderer)
#define HT_ARG(id, name, type, flags, meta, help)
#define HT_RANGE(id, name, min, max) {HT_CMD_##id, name, min, max},
#include "ht-commands.def"
#undef HT_CMD
#undef HT_ARG
#undef HT_RANGE
};

const size_t ht_nranges = sizeof(ht_arg_ranges) / sizeof(ht_arg_ranges[0]);

const struct ht_cmd_spec *ht_cmd_find(const char *name)
{
    for (int i = 0; i < HT_CMD_COUNT; i++)
        if (strcmp(ht_cmds[i].name, name) == 0)
            return &ht_cmds[i];
    return NULL;
}

const struct ht_arg_spec *ht_arg_find(int cmd, const char *name)
{
    for (size_t i = 0; i < ht_nargs; i++)
        if (ht_args[i].cmd == cmd && strcmp(ht_args[i].name, name) == 0)
            return &ht_args[i];
    return NULL;
}

const struct ht_arg_range *ht_arg_range_find(int cmd, const char *name)
{
    for (size_t i = 0; i < ht_nranges; i++)
        if (ht_arg_ranges[i].cmd == cmd && strcmp(ht_arg_ranges[i].name, name) == 0)
            return &ht_arg_ranges[i];
    return NULL;
}

/* Session ids are uint32, and so is what a handler reads from an argument
 * whose range was not declared. */
static const struct ht_arg_range uint32_range = {0, "", 0, 4294967295u};

static int is_uint(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740991.0 &&
           floor(v->valuedouble) == v->valuedouble;
}

/* Checked as a double: is_uint has bounded it by 2^53, where every integer is exact. */
static int check_range(const struct ht_arg_range *r, const char *name, double v, char *err,
                       size_t errsz)
{
    if (v >= (double)r->min && v <= (double)r->max)
        return 0;
    snprintf(err, errsz, "argument \"%s\" must be an integer from %llu to %llu", name,
             (unsigned long long)r->min, (unsigned long long)r->max);
    return HT_EBADARG;
}

static int check_type(const struct ht_arg_spec *a, const cJSON *v, char *err, size_t errsz)
{
    switch (a->type) {
    case HT_ARG_STR:
        if (cJSON_IsString(v))
            return 0;
        snprintf(err, errsz, "argument \"%s\" must be a string", a->name);
        return HT_EBADARG;
    case HT_ARG_UINT: {
        if (!cJSON_IsNumber(v)) {
            snprintf(err, errsz, "argument \"%s\" must be a non-negative integer", a->name);
            return HT_EBADARG;
        }
        const struct ht_arg_range *r = ht_arg_range_find(a->cmd, a->name);
        /* A fraction or a number past 2^53 gets the range message too. */
        return check_range(r ? r : &uint32_range, a->name, is_uint(v) ? v->valuedouble : -1.0,
                           err, errsz);
    }
    case HT_ARG_BOOL:
        if (cJSON_IsBool(v))
            return 0;
        snprintf(err, errsz, "argument \"%s\" must be true or false", a->name);
        return HT_EBADARG;
    case HT_ARG_SIZE: {
        uint64_t sz;
        if (is_uint(v) || (cJSON_IsString(v) && ht_parse_size(v->valuestring, &sz) == 0))
            return 0;
        snprintf(err, errsz, "argument \"%s\" must be a size (bytes, or like \"2GiB\")", a->name);
        return HT_EBADARG;
    }
    case HT_ARG_STEP: {
        uint64_t x;
        if (is_uint(v) || (cJSON_IsString(v) && (ht_parse_size(v->valuestring, &x) == 0 ||
                                                 ht_parse_duration(v->valuestring, &x) == 0)))
            return 0;
        snprintf(err, errsz, "argument \"%s\" must be a size or a duration (like \"1MiB\", \"1s\")",
                 a->name);
        return HT_EBADARG;
    }
    case HT_ARG_LIST: {
        if (cJSON_IsArray(v)) {
            const cJSON *it;
            cJSON_ArrayForEach(it, v)
            {
                if (!cJSON_IsString(it)) {
                    snprintf(err, errsz, "argument \"%s\" must be a list of strings", a->name);
                    return HT_EBADARG;
                }
            }
            return 0;
        }
        snprintf(err, errsz, "argument \"%s\" must be a list of strings", a->name);
        return HT_EBADARG;
    }
    }
    return HT_EINTERNAL;
}

int ht_args_validate(const struct ht_cmd_spec *cmd, const cJSON *args, char *err, size_t errsz)
{
    if (args && !cJSON_IsObject(args)) {
        snprintf(err, errsz, "\"args\" must be an object");
        return HT_EBADARG;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, args)
    {
        if (strcmp(v->string, "session") == 0 && (cmd->flags & HT_CMDF_SESSION)) {
            if (!cJSON_IsString(v) && !is_uint(v)) {
                snprintf(err, errsz, "argument \"session\" must be a session id or name");
                return HT_EBADARG;
            }
            int rc = cJSON_IsString(v)
                         ? 0
                         : check_range(&uint32_range, "session", v->valuedouble, err, errsz);
            if (rc)
                return rc;
            continue;
        }
        const struct ht_arg_spec *a = ht_arg_find(cmd->id, v->string);
        if (!a || (a->flags & HT_ARGF_CTL)) {
            snprintf(err, errsz, "%s: unknown argument \"%.64s\"", cmd->name, v->string);
            return HT_EBADARG;
        }
        int rc = check_type(a, v, err, errsz);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < ht_nargs; i++) {
        const struct ht_arg_spec *a = &ht_args[i];
        if (a->cmd == cmd->id && (a->flags & HT_ARGF_REQUIRED) && !(a->flags & HT_ARGF_CTL) &&
            !cJSON_GetObjectItemCaseSensitive(args, a->name)) {
            snprintf(err, errsz, "%s: missing argument \"%s\"", cmd->name, a->name);
            return HT_EBADARG;
        }
    }
    return 0;
}

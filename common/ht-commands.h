/* The command table (ht-commands.def) as data, and generic argument validation. */
#ifndef HT_COMMANDS_H
#define HT_COMMANDS_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

#define HT_CMDF_SESSION 0x1
#define HT_CMDF_STREAM 0x2
#define HT_CMDF_SUBSCRIBE 0x4

#define HT_ARGF_REQUIRED 0x1
#define HT_ARGF_POSITIONAL 0x2
#define HT_ARGF_CTL 0x4

/* HT_ARG_STEP: a size or a duration, as a string or a number; its unit is
 * that of the value it steps (the daemon checks it against the metric). */
enum ht_arg_type { HT_ARG_STR, HT_ARG_UINT, HT_ARG_BOOL, HT_ARG_SIZE, HT_ARG_LIST, HT_ARG_STEP };

enum ht_cmd_id {
#define HT_CMD(id, name, flags, syn, sum, handler, renderer) HT_CMD_##id,
#define HT_ARG(id, name, type, flags, meta, help)
#include "ht-commands.def"
#undef HT_CMD
#undef HT_ARG
    HT_CMD_COUNT
};

struct ht_cmd_spec {
    int id;
    const char *name;
    unsigned flags;
    const char *synopsis;
    const char *summary;
};

struct ht_arg_spec {
    int cmd;
    const char *name;
    int type;
    unsigned flags;
    const char *metavar;
    const char *help;
};

/* The values an HT_ARG_UINT argument accepts (HT_RANGE in the table). */
struct ht_arg_range {
    int cmd;
    const char *name;
    uint64_t min, max;
};

extern const struct ht_cmd_spec ht_cmds[HT_CMD_COUNT];
extern const struct ht_arg_spec ht_args[];
extern const size_t ht_nargs;
extern const struct ht_arg_range ht_arg_ranges[];
extern const size_t ht_nranges;

/* Command by name, or NULL. */
const struct ht_cmd_spec *ht_cmd_find(const char *name);
/* Declared argument of a command, or NULL. */
const struct ht_arg_spec *ht_arg_find(int cmd, const char *name);
/* Declared range of an HT_ARG_UINT argument, or NULL. */
const struct ht_arg_range *ht_arg_range_find(int cmd, const char *name);
/* Check args (an object or NULL) against the declared specs: unknown names,
 * types, ranges, required ones, ctl-only ones. "session" is accepted for
 * HT_CMDF_SESSION commands. 0, or HT_EBADARG with a message in err. */
int ht_args_validate(const struct ht_cmd_spec *cmd, const struct cJSON *args, char *err,
                     size_t errsz);

#endif

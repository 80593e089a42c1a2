/* heaptracectl: arguments from the shared command table, one request, rendered reply. */
#include "ctl.h"
#include "term.h"

#include "ht-alloc.h"
#include "ht-endpoint.h"
#include "ht-proto.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: heaptracectl [--pipe NAME] [--json] COMMAND [ARGS]\n\ncommands:\n");
    for (int i = 0; i < HT_CMD_COUNT; i++)
        fprintf(f, "  %-9s %-44s %s\n", ht_cmds[i].name, ht_cmds[i].synopsis, ht_cmds[i].summary);
    fprintf(f, "\n'heaptracectl help COMMAND' lists a command's options.\n"
               "exit codes: 0 ok, 1 command error, 2 usage, 3 cannot reach the daemon\n");
}

static void usage_cmd(FILE *f, const struct ht_cmd_spec *cmd)
{
    fprintf(f, "usage: heaptracectl %s %s\n  %s\n", cmd->name, cmd->synopsis, cmd->summary);
    for (size_t i = 0; i < ht_nargs; i++) {
        const struct ht_arg_spec *a = &ht_args[i];
        if (a->cmd != cmd->id)
            continue;
        char flag[64];
        if (a->flags & HT_ARGF_POSITIONAL)
            snprintf(flag, sizeof(flag), "%s", a->metavar);
        else if (strlen(a->name) == 1)
            snprintf(flag, sizeof(flag), "-%s %s", a->name, a->metavar);
        else {
            snprintf(flag, sizeof(flag), "--%s %s", a->name, a->metavar);
            for (char *p = flag + 2; *p && *p != ' '; p++)
                if (*p == '_')
                    *p = '-';
        }
        fprintf(f, "    %-32s %s%s\n", flag, a->help,
                a->type == HT_ARG_LIST && !(a->flags & HT_ARGF_POSITIONAL) ? " (repeatable)" : "");
    }
    if (cmd->flags & HT_CMDF_SESSION)
        fprintf(f, "    %-32s %s\n", "SESSION",
                "session id or name; optional when only one exists");
    const char *notes = ctl_help_notes(cmd->name);
    if (notes)
        fputs(notes, f);
}

/* The error and one hint: the whole help would bury the error. */
static void usage_hint(const struct ht_cmd_spec *cmd)
{
    if (cmd)
        fprintf(stderr, "Run 'heaptracectl help %s' for its options.\n", cmd->name);
    else
        fprintf(stderr, "Run 'heaptracectl help' for the commands.\n");
}

static int usage_error(const struct ht_cmd_spec *cmd, const char *fmt, const char *what)
{
    fprintf(stderr, "heaptracectl: ");
    fprintf(stderr, fmt, ctl_text(what)); /* what the user typed: escaped for the terminal */
    fprintf(stderr, "\n");
    usage_hint(cmd);
    return EXIT_USAGE;
}

/* Frames of a cull-list file: read here, with the user's rights. */
static int add_cull_file(cJSON *list, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        char *s = line, *e = line + strlen(line);
        while (*s == ' ' || *s == '\t')
            s++;
        while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            *--e = '\0';
        if (*s && *s != '#')
            cJSON_AddItemToArray(list, cJSON_CreateString(s));
    }
    fclose(f);
    return 0;
}

static int set_arg(struct ctl *c, const struct ht_arg_spec *a, const char *val)
{
    if (!strcmp(a->name, "o")) {
        if (val && !*val) /* said before the daemon does any work for it */
            return usage_error(c->cmd, "expected a file name, got \"%s\"", val);
        c->output = val;
        return 0;
    }
    if (!strcmp(a->name, "file")) {
        c->file = val;
        return 0;
    }
    if ((a->flags & HT_ARGF_CTL) && !strcmp(a->name, "process")) {
        c->etl_process = val;
        return 0;
    }
    if ((a->flags & HT_ARGF_CTL) && !strcmp(a->name, "pid")) {
        char *end;
        unsigned long long v = strtoull(val, &end, 10);
        if (strspn(val, "0123456789") != strlen(val) || end == val || *end || v == 0 ||
            v > UINT32_MAX)
            return usage_error(c->cmd, "expected a process id, got \"%s\"", val);
        c->etl_pid = (uint32_t)v;
        return 0;
    }
    switch (a->type) {
    case HT_ARG_BOOL:
        if (!strcmp(a->name, "tree"))
            c->tree = 1;
        else
            cJSON_AddTrueToObject(c->args, a->name);
        return 0;
    case HT_ARG_UINT: {
        char *end;
        unsigned long long v = strtoull(val, &end, 10);
        if (strspn(val, "0123456789") != strlen(val) || end == val || *end)
            return usage_error(c->cmd, "expected a non-negative number, got \"%s\"", val);
        cJSON_DeleteItemFromObjectCaseSensitive(c->args, a->name);
        cJSON_AddNumberToObject(c->args, a->name, (double)v);
        return 0;
    }
    case HT_ARG_LIST: {
        cJSON *list = cJSON_GetObjectItemCaseSensitive(c->args, a->name);
        if (!list)
            list = cJSON_AddArrayToObject(c->args, a->name);
        if (!strcmp(a->name, "cull_list")) {
            if (add_cull_file(list, val) != 0) {
                fprintf(stderr, "heaptracectl: cannot read cull list %s\n", val);
                return EXIT_USAGE;
            }
            return 0;
        }
        cJSON_AddItemToArray(list, cJSON_CreateString(val));
        return 0;
    }
    default:
        cJSON_DeleteItemFromObjectCaseSensitive(c->args, a->name);
        cJSON_AddStringToObject(c->args, a->name, val);
        return 0;
    }
}

static const struct ht_arg_spec *find_flag(int cmd, const char *flag)
{
    char name[64];
    const char *f = flag[1] == '-' ? flag + 2 : flag + 1;
    if (!strcmp(flag, "--output"))
        f = "o";
    snprintf(name, sizeof(name), "%s", f);
    for (char *p = name; *p; p++)
        if (*p == '-')
            *p = '_';
    const struct ht_arg_spec *a = ht_arg_find(cmd, name);
    return a && !(a->flags & HT_ARGF_POSITIONAL) ? a : NULL;
}

/* Long: the global options, one branch each, before the command's own. */
static int parse_args(struct ctl *c, int argc, char **argv)
{
    const char *pos[4];
    int npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--") && c->cmd->id == HT_CMD_RUN) {
            cJSON *list = cJSON_AddArrayToObject(c->args, "argv");
            for (i++; i < argc; i++)
                cJSON_AddItemToArray(list, cJSON_CreateString(argv[i]));
            break;
        }
        if (a[0] == '-' && a[1] && strcmp(a, "-") != 0) {
            /* Global options are accepted after the command too. */
            if (!strcmp(a, "--json")) {
                c->json = 1;
                continue;
            }
            if (!strcmp(a, "--pipe") && i + 1 < argc) {
                c->endpoint = argv[++i];
                continue;
            }
            if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                usage_cmd(stdout, c->cmd);
                exit(EXIT_OK);
            }
            const struct ht_arg_spec *spec = find_flag(c->cmd->id, a);
            if (!spec)
                return usage_error(c->cmd, "unknown option %s", a);
            if (spec->type == HT_ARG_BOOL) {
                set_arg(c, spec, NULL);
                continue;
            }
            if (i + 1 >= argc)
                return usage_error(c->cmd, "option %s needs a value", a);
            int rc = set_arg(c, spec, argv[++i]);
            if (rc)
                return rc;
            continue;
        }
        if (npos == 4)
            return usage_error(c->cmd, "too many arguments (%s)", a);
        pos[npos++] = a;
    }
    /* Positionals: the command's own come last; a SESSION may lead. */
    const struct ht_arg_spec *own[2];
    int nown = 0;
    for (size_t i = 0; i < ht_nargs; i++)
        if (ht_args[i].cmd == c->cmd->id && (ht_args[i].flags & HT_ARGF_POSITIONAL) && nown < 2)
            own[nown++] = &ht_args[i];
    int k = 0;
    if ((c->cmd->flags & HT_CMDF_SESSION) && npos > nown) {
        char *end;
        unsigned long id = strtoul(pos[0], &end, 10);
        if (*end == '\0' && end != pos[0])
            cJSON_AddNumberToObject(c->args, "session", (double)id);
        else
            cJSON_AddStringToObject(c->args, "session", pos[0]);
        k = 1;
    }
    if (npos - k > nown)
        return usage_error(c->cmd, "unexpected argument %s", pos[npos - 1]);
    for (int j = 0; k < npos; j++, k++) {
        int rc = set_arg(c, own[j], pos[k]);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < ht_nargs; i++) {
        const struct ht_arg_spec *a = &ht_args[i];
        if (a->cmd != c->cmd->id || !(a->flags & HT_ARGF_REQUIRED))
            continue;
        int have = !strcmp(a->name, "o") ? c->output != NULL
                   : !strcmp(a->name, "file")
                       ? c->file != NULL
                       : cJSON_GetObjectItemCaseSensitive(c->args, a->name) != NULL;
        if (!have)
            return usage_error(c->cmd, "missing %s", a->metavar);
    }
    /* The same generic checks the daemon makes (types, ranges), before anything is sent. */
    char err[256];
    if (ht_args_validate(c->cmd, c->args, err, sizeof(err)) != 0)
        return usage_error(c->cmd, "%s", err);
    return 0;
}

/* Long: the ctl's whole run in order: options, connection, the command, its
 * exit code. */
int main(int argc, char **argv)
{
    struct ctl c;
    memset(&c, 0, sizeof(c));
    ht_alloc_init();
    term_init();
    int i = 1;
    const char *pipe_name = NULL;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--pipe") && i + 1 < argc)
            pipe_name = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            c.json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return EXIT_OK;
        } else {
            return usage_error(NULL, "unknown option %s", argv[i]);
        }
    }
    if (i >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[i], "help")) {
        const struct ht_cmd_spec *cmd = i + 1 < argc ? ht_cmd_find(argv[i + 1]) : NULL;
        if (i + 1 < argc && !cmd)
            return usage_error(NULL, "no command named %s", argv[i + 1]);
        if (cmd)
            usage_cmd(stdout, cmd);
        else
            usage(stdout);
        return EXIT_OK;
    }
    c.cmd = ht_cmd_find(argv[i]);
    if (!c.cmd)
        return usage_error(NULL, "unknown command %s", argv[i]);
    c.args = cJSON_CreateObject();
    int rc = parse_args(&c, argc - i - 1, argv + i + 1);
    if (rc) {
        cJSON_Delete(c.args);
        return rc;
    }
    c.endpoint = ht_endpoint(c.endpoint ? c.endpoint : pipe_name);
    char err[512];
    if (conn_open(&c.conn, c.endpoint, err, sizeof(err)) != 0) {
        fprintf(stderr, "heaptracectl: %s\n", err);
        cJSON_Delete(c.args);
        return EXIT_UNREACHABLE;
    }
    switch (c.cmd->id) {
    case HT_CMD_LOAD:
        rc = ctl_load(&c);
        break;
    case HT_CMD_RECORD:
        rc = ctl_record(&c);
        break;
    case HT_CMD_EXPORT:
        rc = ctl_export(&c);
        break;
    case HT_CMD_TOP:
        rc = ctl_top(&c);
        break;
    case HT_CMD_RUN:
        rc = ctl_run(&c);
        c.args = NULL;
        break;
    default: {
        cJSON *data = NULL;
        rc = ctl_call(&c, c.cmd->name, c.args, &data);
        c.args = NULL;
        if (rc == EXIT_OK)
            render_reply(&c, data);
        cJSON_Delete(data);
        break;
    }
    }
    cJSON_Delete(c.args);
    conn_close(c.conn);
    return rc;
}

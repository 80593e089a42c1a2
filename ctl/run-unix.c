/*
 * run: the daemon opens the session; where its reply says how (the agent
 * source, "launch"), this process becomes the program: the agent preloaded
 * (its path from the daemon, never from the command line), the session's
 * socket and token in the environment, everything else as the user has it
 * (terminal, directory, environment, uid). The daemon checked this
 * process's pid, which the exec keeps. Without "launch" (a source that
 * starts the program itself) the reply is shown as for start.
 */
#include "ctl.h"

#include "agent-ring.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *field(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* LD_PRELOAD with the agent first (ahead of what the user preloads). */
static int preload_set(const char *agent)
{
    const char *old = getenv("LD_PRELOAD");
    if (!old || !*old)
        return setenv("LD_PRELOAD", agent, 1);
    size_t n = strlen(agent) + strlen(old) + 2;
    char *v = malloc(n);
    if (!v)
        return -1;
    snprintf(v, n, "%s:%s", agent, old);
    int rc = setenv("LD_PRELOAD", v, 1);
    free(v);
    return rc;
}

/* A number of the launch object into the environment, when there. */
static int env_num(const cJSON *l, const char *key, const char *var)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(l, key);
    char num[24];
    if (!cJSON_IsNumber(v))
        return 0;
    snprintf(num, sizeof(num), "%.0f", v->valuedouble);
    return setenv(var, num, 1);
}

static int env_set(const cJSON *l)
{
    const cJSON *depth = cJSON_GetObjectItemCaseSensitive(l, "depth");
    char num[16];
    snprintf(num, sizeof(num), "%d", cJSON_IsNumber(depth) ? (int)depth->valuedouble : 0);
    const char *agent = field(l, "agent"), *sock = field(l, "socket"), *tok = field(l, "token");
    if (!agent || !sock || !tok)
        return -1;
    const char *st = field(l, "stacks");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "follow")) &&
        setenv(HTA_ENV_FOLLOW, "1", 1))
        return -1;
    if (env_num(l, "sample", HTA_ENV_SAMPLE) || env_num(l, "sample_seed", HTA_ENV_SEED) ||
        env_num(l, "max_overhead", HTA_ENV_MAX_OVERHEAD))
        return -1;
    return preload_set(agent) || setenv(HTA_ENV_SOCKET, sock, 1) || setenv(HTA_ENV_TOKEN, tok, 1) ||
                   setenv(HTA_ENV_STACKS, st ? st : "dwarf", 1) || setenv(HTA_ENV_DEPTH, num, 1)
               ? -1
               : 0;
}

/* The exec failed: the session would wait for an agent that never comes. */
static void session_abandon(struct ctl *c, const cJSON *d)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(d, "session");
    cJSON *args = cJSON_CreateObject();
    cJSON *data = NULL;
    if (!args || !cJSON_IsNumber(id))
        return;
    cJSON_AddNumberToObject(args, "session", id->valuedouble);
    ctl_call(c, "stop", args, &data);
    cJSON_Delete(data);
}

int ctl_run(struct ctl *c)
{
    const cJSON *argv = cJSON_GetObjectItemCaseSensitive(c->args, "argv");
    int argc = cJSON_GetArraySize(argv);
    char **av = calloc((size_t)argc + 1, sizeof(char *));
    if (!av)
        return EXIT_CMD;
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, argv) av[i++] = strdup(it->valuestring);
    cJSON *data = NULL;
    int rc = ctl_call(c, c->cmd->name, c->args, &data);
    c->args = NULL;
    const cJSON *l = rc == EXIT_OK ? cJSON_GetObjectItemCaseSensitive(data, "launch") : NULL;
    if (rc == EXIT_OK && !cJSON_IsObject(l)) {
        render_reply(c, data);
    } else if (rc == EXIT_OK) {
        /* The program's stdout is the user's: the session line goes to stderr. */
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(data, "name");
        fprintf(stderr, "heaptracectl: session %.0f \"%s\" traces pid %ld: %s\n",
                cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(data, "session")),
                cJSON_IsString(name) ? ctl_text(name->valuestring) : "", (long)getpid(), av[0]);
        fflush(NULL);
        if (env_set(l) == 0)
            execvp(av[0], av);
        fprintf(stderr, "heaptracectl: cannot run %s: %s\n", ctl_text(av[0]), strerror(errno));
        session_abandon(c, data);
        rc = 127;
    }
    cJSON_Delete(data);
    for (i = 0; i < argc; i++)
        free(av[i]);
    free(av);
    return rc;
}

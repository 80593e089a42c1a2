/* The ctl's streaming commands: load (upload), record and export (download), top (subscription). */
#include "ctl.h"

#include "ht-proto.h"
#include "ht-units.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ctl_send(struct ctl *c, const char *cmd, cJSON *args, int64_t *id);

/* Send a streaming request (args taken over) and wait for its acknowledgement. */
static int open_stream(struct ctl *c, const char *cmd, int64_t *id, cJSON **ack)
{
    int rc = ctl_send(c, cmd, c->args, id);
    c->args = NULL;
    *ack = NULL;
    return rc != 0 ? rc : ctl_read_frame(c, *id, ack);
}

static FILE *open_output(struct ctl *c)
{
    if (!c->output || !strcmp(c->output, "-"))
        return stdout;
    /* Written with the user's own rights, never by the daemon. */
    FILE *f = fopen(c->output, "w");
    if (!f)
        perror(c->output);
    return f;
}

static int close_output(FILE *f)
{
    if (f == stdout)
        return fflush(f) == 0 ? 0 : -1;
    return fclose(f) == 0 ? 0 : -1;
}

int ctl_load(struct ctl *c)
{
    FILE *in = strcmp(c->file, "-") ? fopen(c->file, "rb") : stdin;
    if (!in) {
        perror(c->file);
        return EXIT_CMD;
    }
    int64_t id;
    cJSON *env;
    int rc = open_stream(c, "load", &id, &env); /* acknowledged: streaming may start */
    if (rc != 0) {
        if (in != stdin)
            fclose(in);
        return rc;
    }
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(env, "data");
    const cJSON *sid = cJSON_GetObjectItemCaseSensitive(d, "session");
    if (!c->json)
        fprintf(stderr, "loading %s into session %d...\n", c->file,
                cJSON_IsNumber(sid) ? sid->valueint : 0);
    cJSON_Delete(env);
    static char buf[1 << 16];
    char hdr[32];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) {
        int hl = snprintf(hdr, sizeof(hdr), "%zu\n", n);
        if (conn_send(&c->conn, hdr, (size_t)hl) || conn_send(&c->conn, buf, n)) {
            rc = EXIT_UNREACHABLE;
            break;
        }
    }
    int read_error = ferror(in);
    if (in != stdin)
        fclose(in);
    if (rc == 0 && conn_send(&c->conn, "0\n", 2) != 0)
        rc = EXIT_UNREACHABLE;
    if (rc != 0) {
        /* The daemon may have said why before it closed (the session was
         * dropped): its error is worth more than ours. */
        fprintf(stderr, "heaptracectl: lost the connection while loading\n");
        if (ctl_read_frame(c, id, &env) == EXIT_OK)
            cJSON_Delete(env);
        return rc;
    }
    rc = ctl_read_frame(c, id, &env);
    if (rc != 0)
        return rc;
    cJSON *sum = cJSON_DetachItemFromObjectCaseSensitive(env, "data");
    cJSON_Delete(env);
    render_reply(c, sum);
    cJSON_Delete(sum);
    if (read_error) {
        fprintf(stderr, "heaptracectl: read error on %s: the session holds what was sent\n",
                c->file);
        return EXIT_CMD;
    }
    return EXIT_OK;
}

/* The count of a recording's "lost" line ({"t":..,"ev":"lost","count":N}), else 0. */
static uint64_t record_lost_count(const char *line)
{
    if (!strstr(line, "\"ev\":\"lost\""))
        return 0;
    cJSON *o = cJSON_Parse(line);
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "count");
    uint64_t count = cJSON_IsNumber(n) && n->valuedouble > 0 ? (uint64_t)n->valuedouble : 0;
    cJSON_Delete(o);
    return count;
}

/* The daemon's total for the recording ("lost" in the end frame) wins over
 * the sum of the lines: a gap still open at the end has its line too, but a
 * line can be lost with the connection. */
static uint64_t record_lost_total(const cJSON *end, uint64_t counted)
{
    const cJSON *n =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(end, "data"), "lost");
    return cJSON_IsNumber(n) && n->valuedouble > (double)counted ? (uint64_t)n->valuedouble
                                                                 : counted;
}

int ctl_record(struct ctl *c)
{
    FILE *out = open_output(c);
    if (!out)
        return EXIT_CMD;
    int64_t id;
    cJSON *env;
    int rc = open_stream(c, "record", &id, &env);
    if (rc != 0) {
        close_output(out);
        return rc;
    }
    cJSON_Delete(env);
    uint64_t events = 0, lost = 0;
    for (;;) {
        char *line = conn_read_line(&c->conn, HT_REPLY_MAX);
        if (!line) {
            fprintf(stderr, "heaptracectl: the daemon closed the connection\n");
            rc = EXIT_UNREACHABLE;
            break;
        }
        if (strncmp(line, "{\"v\":", 5) == 0) {
            /* The envelope that ends the recording. */
            cJSON *e = cJSON_Parse(line);
            free(line);
            lost = record_lost_total(e, lost);
            if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "ok")))
                rc = ctl_print_error(e);
            else if (!c->json && out != stdout)
                fprintf(stderr, "recorded %llu events to %s (%s)\n", (unsigned long long)events,
                        c->output,
                        cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                            cJSON_GetObjectItemCaseSensitive(e, "data"), "end")));
            cJSON_Delete(e);
            break;
        }
        fputs(line, out);
        fputc('\n', out);
        uint64_t gap = record_lost_count(line);
        lost += gap;
        events += gap == 0;
        free(line);
    }
    if (close_output(out) != 0 && rc == 0)
        rc = EXIT_CMD;
    /* The recording is kept: its gaps are marked in it. */
    if (lost > 0) {
        fprintf(stderr,
                "heaptracectl: the recording has gaps: %llu events lost while the recorder "
                "was behind (\"lost\" lines mark where)\n",
                (unsigned long long)lost);
        if (rc == 0)
            rc = EXIT_CMD;
    }
    return rc;
}

int ctl_export(struct ctl *c)
{
    cJSON *data = NULL;
    int rc = ctl_call(c, "export", c->args, &data);
    c->args = NULL;
    if (rc != 0)
        return rc;
    FILE *out = open_output(c);
    if (!out) {
        cJSON_Delete(data);
        return EXIT_CMD;
    }
    const cJSON *lines = cJSON_GetObjectItemCaseSensitive(data, "lines");
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(data, "result");
    if (lines) {
        const cJSON *l;
        cJSON_ArrayForEach(l, lines)
        {
            fputs(l->valuestring, out);
            fputc('\n', out);
        }
    } else if (result) {
        char *s = cJSON_Print(result);
        if (s) {
            fputs(s, out);
            fputc('\n', out);
            cJSON_free(s);
        }
    }
    cJSON_Delete(data);
    return close_output(out) == 0 ? EXIT_OK : EXIT_CMD;
}

int ctl_top(struct ctl *c)
{
    int64_t id;
    int rc = ctl_send(c, "top", c->args, &id);
    c->args = NULL;
    int tty = isatty(STDOUT_FILENO) && !c->json;
    while (rc == 0) {
        cJSON *env;
        rc = ctl_read_frame(c, id, &env);
        if (rc != 0)
            break;
        int more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(env, "more"));
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(env, "data");
        if (cJSON_GetObjectItemCaseSensitive(d, "end")) {
            if (!c->json)
                printf("session ended: %s\n",
                       cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "end")));
        } else {
            render_top(c, d, tty);
        }
        fflush(stdout);
        cJSON_Delete(env);
        if (!more)
            break;
    }
    return rc;
}

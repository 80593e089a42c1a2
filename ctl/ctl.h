/* heaptracectl internals shared by its files. */
#ifndef CTL_H
#define CTL_H

#include "conn.h"
#include "ht-commands.h"

#include <stdint.h>
#include <stdio.h>

struct cJSON;

/* Exit codes (docs/protocol.md#the-ctl). */
enum { EXIT_OK = 0, EXIT_CMD = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

struct ctl {
    const char *endpoint;
    int json;
    struct conn *conn;
    int64_t next_id;
    const struct ht_cmd_spec *cmd;
    struct cJSON *args; /* sent to the daemon */
    const char *file;   /* load FILE */
    const char *output; /* -o FILE */
    int tree;
    uint32_t etl_pid;        /* load FILE.etl --pid N */
    const char *etl_process; /* load FILE.etl --process NAME */
};

/* Send a request and read its reply, merging "more" frames. On success
 * *data is the merged data (caller frees). Returns an exit code; errors are
 * printed. */
int ctl_call(struct ctl *c, const char *cmd, struct cJSON *args, struct cJSON **data);
/* Read one reply frame for id: 0 ok (*frame = the envelope), else an exit code. */
int ctl_read_frame(struct ctl *c, int64_t id, struct cJSON **frame);
int ctl_print_error(const struct cJSON *envelope);

/* Rendering (render.c). */
/* s with control characters, DEL, C1 and non-UTF-8 bytes escaped, for a
 * terminal; valid until 16 more calls. */
const char *ctl_text(const char *s);
void render_reply(struct ctl *c, const struct cJSON *data);
void render_query(struct ctl *c, const struct cJSON *data);
void render_top(struct ctl *c, const struct cJSON *data, int tty);

/* Streams (stream.c). */
/* Longer help printed after a command's options, or NULL (help-notes.c). */
const char *ctl_help_notes(const char *cmd);
int ctl_load(struct ctl *c);
/* load FILE.etl (load-etl.c): is in a Windows trace (rewound after the look)? Its processes
 * (those --pid / --process pick) each loaded into a session of its own: an exit code (errors
 * printed; the sessions made stay whatever fails later). */
int ctl_etl_is(FILE *in);
/* The first n bytes of a stream are those of a Windows trace (.etl). */
int ctl_etl_head(const unsigned char *h, size_t n);
int ctl_etl_load(struct ctl *c, FILE *in, const char *path);
int ctl_record(struct ctl *c);
int ctl_export(struct ctl *c);
struct out_file;
/* A binary export's bytes as raw chunks after its header frame head,
 * written to o (*n: the bytes written) and checked against the trailer's
 * length and CRC-32 (export-chunks.c). An exit code, errors printed. */
int ctl_export_chunks(struct ctl *c, int64_t id, struct out_file *o, const struct cJSON *head,
                      uint64_t *n);
int ctl_top(struct ctl *c);
/* run: the session, then (where the reply says how: the agent source) the
 * program exec'd in this process with the agent preloaded (run-unix.c). */
int ctl_run(struct ctl *c);

#endif

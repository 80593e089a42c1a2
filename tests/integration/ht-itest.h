/* ht-itest: what its platform files (ht-itest-unix.c, ht-itest-win.c) share
 * with the cases (ht-itest.c), and what each provides. */
#ifndef HT_ITEST_H
#define HT_ITEST_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Bounds: wine starts a process in ~50 ms, a loaded machine takes more. */
#define ITEST_CMD_MS 60000
#define ITEST_START_MS 20000

struct buf {
    char *p;
    size_t n, cap;
};
const char *buf_str(const struct buf *b);

/* A child process: its standard output read into out_b, its error output into err_b. */
struct child {
    uv_process_t proc;
    uv_pipe_t in, out, err;
    struct buf out_b, err_b;
    int open; /* handles not closed yet */
    int exited;
    int64_t status;
    int term_signal;
    char *in_data; /* written to its stdin, then stdin is closed */
};

extern uv_loop_t *loop;
extern char tmpdir[1024]; /* the case's own directory */
/* Set: children started now share our console (Windows; for Ctrl-C). Else
 * they have none (CREATE_NO_WINDOW), so a Ctrl-C on ours never reaches them. */
extern int child_on_console;

/* Start argv[0] with argv; stdin a pipe we write (with_stdin), else none. 0 or -1. */
int child_start(struct child *c, char **argv, int with_stdin);
/* Its exit code once it ended (killed past ms: -1). */
int child_wait(struct child *c, uint64_t ms, const char *what);
void child_free(struct child *c);
void child_exit_cb(uv_process_t *p, int64_t status, int sig);
int write_file(const char *path, const char *s);

/* Platform. The daemon's endpoint for case number counter (dir is the case's own). */
void itest_endpoint(char *buf, size_t n, const char *dir, unsigned counter);
/* Start this program as "--serve ep dir" as an account heaptracectl must not
 * trust (Windows: our token with Administrators deny-only; Unix: nobody).
 * 0, 77 when this machine cannot (skip), or -1. */
int itest_untrusted_start(const char *ep, const char *dir);
void itest_untrusted_wait(void);
/* Ready to interrupt a child as a user would (Windows: a console of our own).
 * 0 or 77 (skip). Then itest_interrupt_send: Ctrl-C (Windows), SIGINT (Unix). 0 or -1. */
int itest_interrupt_prepare(void);
int itest_interrupt_send(struct child *c);
/* argv with standard input from in_path and both outputs to out_path, as a
 * shell's "<" and ">" give them (Windows: CreateProcessW with plain inherited
 * handles). uv_spawn would not do: it hands the child's C runtime its
 * descriptors flagged binary (and under wine, cmd.exe passes that on), hiding
 * a program that reads or writes in text mode. Exit code or -1. */
int itest_run_redirected(char **argv, const char *in_path, const char *out_path);

#endif

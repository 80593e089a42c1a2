/* ht-itest's Unix part (ht-itest.h): socket paths, a server as another
 * user, SIGINT, a shell's redirection. */
#include "ht-itest.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void itest_endpoint(char *buf, size_t n, const char *dir, unsigned counter)
{
    (void)counter; /* the directory is the case's own */
    snprintf(buf, n, "%s/ht.sock", dir);
}

static struct child untrusted;

/* As nobody (65534): a listener that is neither root nor us. Only root can. */
int itest_untrusted_start(const char *ep, const char *dir)
{
    if (getuid() != 0) {
        printf("skip: starting a server as another user needs root\n");
        return 77;
    }
    uv_fs_t req;
    uv_fs_chmod(NULL, &req, dir, 0777, NULL); /* nobody makes its socket and files there */
    uv_fs_req_cleanup(&req);
    char exe[1024];
    size_t n = sizeof(exe);
    uv_exepath(exe, &n);
    char *argv[] = {exe, "--serve", (char *)ep, (char *)dir, NULL};
    uv_process_options_t o;
    memset(&o, 0, sizeof(o));
    memset(&untrusted, 0, sizeof(untrusted));
    o.file = exe;
    o.args = argv;
    o.exit_cb = child_exit_cb;
    o.flags = UV_PROCESS_SETUID | UV_PROCESS_SETGID;
    o.uid = 65534;
    o.gid = 65534;
    untrusted.proc.data = &untrusted;
    int rc = uv_spawn(loop, &untrusted.proc, &o);
    if (rc != 0) {
        fprintf(stderr, "cannot start the server as nobody: %s\n", uv_strerror(rc));
        return -1;
    }
    untrusted.open = 1;
    return 0;
}

void itest_untrusted_wait(void)
{
    child_wait(&untrusted, 20000, "the untrusted server");
}

int itest_interrupt_prepare(void)
{
    return 0;
}

int itest_interrupt_send(struct child *c)
{
    return uv_process_kill(&c->proc, SIGINT);
}

int itest_run_redirected(char **argv, const char *in_path, const char *out_path)
{
    char cmd[8192];
    size_t n = (size_t)snprintf(cmd, sizeof(cmd), "exec");
    for (int i = 0; argv[i]; i++)
        n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " '%s'", argv[i]);
    snprintf(cmd + n, sizeof(cmd) - n, " <'%s' >'%s' 2>&1", in_path, out_path);
    char *sh[] = {"/bin/sh", "-c", cmd, NULL};
    struct child c;
    if (child_start(&c, sh, 0) != 0)
        return -1;
    int rc = child_wait(&c, ITEST_CMD_MS, argv[0]);
    child_free(&c);
    return rc;
}

/*
 * probe-floor: attach the empty BPF program of probe-floor.bpf.o to a process
 * at given file offsets, then hold until SIGINT/SIGTERM (bench-live.sh).
 * usage: probe-floor OBJ PID FILE:OFFSET:entry|ret ...
 * OFFSET is a file offset in FILE (hex with 0x, or decimal), as libbpf's
 * bpf_program__attach_uprobe takes it. Prints {"attached":N} once every probe
 * is attached; on any failure detaches what was attached and exits 1.
 * Debian's bpftrace 0.17 refuses probes at func+offset ("compiled without
 * (k|u)probe offset support"), hence this helper.
 */
#define _GNU_SOURCE
#include <bpf/libbpf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROBES 256

int main(int argc, char **argv)
{
    if (argc < 4 || argc - 3 > MAX_PROBES) {
        fprintf(stderr, "usage: probe-floor OBJ PID FILE:OFFSET:entry|ret ... (at most %d)\n",
                MAX_PROBES);
        return 2;
    }
    int pid = atoi(argv[2]), rc = 1, n = 0;
    struct bpf_link *links[MAX_PROBES];
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
    if (!obj) {
        fprintf(stderr, "probe-floor: open %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    if (bpf_object__load(obj) != 0) {
        fprintf(stderr, "probe-floor: load: %s\n", strerror(errno));
        goto out;
    }
    struct bpf_program *prog = bpf_object__find_program_by_name(obj, "floor_empty");
    if (!prog)
        goto out;
    for (int i = 3; i < argc; i++) {
        char spec[4096];
        snprintf(spec, sizeof spec, "%s", argv[i]);
        char *kind = strrchr(spec, ':');
        char *off = NULL;
        if (kind) {
            *kind++ = 0;
            off = strrchr(spec, ':');
        }
        if (!kind || !off || (strcmp(kind, "entry") && strcmp(kind, "ret"))) {
            fprintf(stderr, "probe-floor: bad probe %s (FILE:OFFSET:entry|ret)\n", argv[i]);
            goto out;
        }
        *off++ = 0;
        size_t o = strtoull(off, NULL, 0);
        links[n] = bpf_program__attach_uprobe(prog, !strcmp(kind, "ret"), pid, spec, o);
        if (!links[n]) {
            fprintf(stderr, "probe-floor: attach %s: %s\n", argv[i], strerror(errno));
            goto out;
        }
        n++;
    }
    printf("{\"attached\":%d}\n", n);
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    rc = 0;
out:
    for (int i = 0; i < n; i++)
        bpf_link__destroy(links[i]);
    bpf_object__close(obj);
    return rc;
}

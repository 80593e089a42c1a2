#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
/*
 * closeall: a program that closes every descriptor past stderr (as daemons
 * do: close_range, closefrom), then opens its own: 8 socket pairs, fds
 * 3..18, the agent's old number among them (tests/integration/cases-advrun.sh).
 * A child (forked) checks they are all still open, waits for the parent's
 * exit, and reads what arrived on them: nothing, the program sends nothing.
 * Prints {"child_closed":N,"stray_bytes":N}.
 */
int main(void)
{
    void *keep = malloc(200); /* a block live at the exit: the session has it */
    __asm__ volatile("" : : "r"(keep) : "memory");
    syscall(SYS_close_range, 3, ~0u, 0);
    int sv[8][2];
    for (int i = 0; i < 8; i++)
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]))
            return 3;
    pid_t parent = getpid();
    pid_t c = fork();
    if (c == 0) {
        int closed = 0;
        for (int i = 0; i < 8; i++)
            for (int k = 0; k < 2; k++)
                closed += fcntl(sv[i][k], F_GETFD) < 0;
        for (int i = 0; i < 200 && getppid() == parent; i++)
            usleep(10000);
        int stray = 0;
        char b[64];
        for (int i = 0; i < 8; i++)
            for (int k = 0; k < 2; k++) {
                ssize_t n = recv(sv[i][k], b, sizeof b, MSG_DONTWAIT);
                stray += n > 0 ? (int)n : 0;
            }
        printf("{\"child_closed\":%d,\"stray_bytes\":%d}\n", closed, stray);
        fflush(stdout);
        _exit(0);
    }
    usleep(100000);
    return 0;
}

/* Unix endpoint: socket directory and modes, one daemon per socket, SO_PEERCRED admission. */
#define _GNU_SOURCE /* struct ucred */
#include "endpoint.h"

#include "ht-alloc.h"
#include "ht-endpoint.h"
#include "ht-error.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#define ADMIN_GROUP "heaptrace"

struct endpoint {
    uv_pipe_t listener; /* libuv listens and accepts */
    endpoint_connection_cb cb;
    void *arg;
    int listening; /* the socket file is ours to remove */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* Is a daemon answering on path? (A socket file nobody listens on is stale.) */
static int endpoint_alive(const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path))
        return 0;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    int alive = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return alive;
}

/* The directory part of path ("." when it has none). */
static void path_dir(const char *path, char *dir, size_t dirsz)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, dirsz, ".");
    else if (slash == path)
        snprintf(dir, dirsz, "/");
    else
        snprintf(dir, dirsz, "%.*s", (int)(slash - path), path);
}

/* A directory we made (or the default one): group heaptrace, 0750, set on
 * the descriptor so no path is followed. */
static void dir_own(int fd, const char *dir)
{
    struct group *g = getgrnam(ADMIN_GROUP);
    if (geteuid() == 0 && g && fchown(fd, 0, g->gr_gid) != 0)
        log_warn("cannot give %s to group " ADMIN_GROUP ": %s", dir, strerror(errno));
    if (fchmod(fd, 0750) != 0)
        log_warn("cannot set the mode of %s: %s", dir, strerror(errno));
}

/* The socket's directory is created 0750 when missing (one level); an
 * existing one is accepted only if it is a real directory (not a symlink),
 * owned by root or the daemon's user, that nobody else can write into: else
 * someone could swap the socket. strict is for the default directory; a
 * --pipe may sit in a sticky directory like /tmp, where others cannot remove
 * or rename our socket (sticky bit: unlink(2), rename(2) EPERM). */
static int dir_check(const char *dir, int strict, char *err, size_t errsz)
{
    mode_t old = umask(077);
    int made = mkdir(dir, 0750) == 0;
    int mkerr = errno;
    umask(old);
    if (!made && mkerr != EEXIST) {
        snprintf(err, errsz, "cannot create the endpoint directory %s: %s", dir, strerror(mkerr));
        return HT_EPERM;
    }
    /* O_NOFOLLOW: a symlink in place of the directory fails with ELOOP. */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errsz, "endpoint directory %s %s: refusing it", dir,
                 e == ELOOP || e == ENOTDIR ? "is a symlink or not a directory" : strerror(e));
        return HT_EPERM;
    }
    int rc = 0;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errsz, "cannot stat %s: %s", dir, strerror(errno));
        rc = HT_EPERM;
    } else if (st.st_uid != 0 && st.st_uid != geteuid()) {
        snprintf(err, errsz,
                 "endpoint directory %s is owned by uid %u, not root or the daemon's user: "
                 "refusing it (remove it; heaptraced creates it)",
                 dir, (unsigned)st.st_uid);
        rc = HT_EPERM;
    } else if ((st.st_mode & 022) && (strict || !(st.st_mode & S_ISVTX))) {
        snprintf(err, errsz,
                 "endpoint directory %s is writable by %s (mode %04o): refusing it "
                 "(others could replace the socket)",
                 dir, st.st_mode & 002 ? "everyone" : "its group", (unsigned)(st.st_mode & 07777));
        rc = HT_EPERM;
    } else if (made || strict) {
        /* The default directory is ours even when systemd made it
         * (RuntimeDirectory=): group heaptrace must reach the socket. */
        dir_own(fd, dir);
    }
    close(fd);
    return rc;
}

static int endpoint_prepare(const char *path, char *err, size_t errsz)
{
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errsz, "endpoint path too long: %s", path);
        return HT_EBADARG;
    }
    char dir[sizeof(sa.sun_path)];
    path_dir(path, dir, sizeof(dir));
    int rc = dir_check(dir, strcmp(path, HT_ENDPOINT_DEFAULT) == 0, err, errsz);
    if (rc != 0)
        return rc;
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errsz, "%s exists and is not a socket: refusing to replace it", path);
            return HT_EEXIST;
        }
        if (endpoint_alive(path)) {
            snprintf(err, errsz, "another heaptraced is already running on %s", path);
            return HT_EEXIST;
        }
        unlink(path); /* stale socket of a daemon that died (unlink never follows a symlink) */
    }
    return 0;
}

/* The socket gets its mode and group as bind(2) creates it, never by path
 * afterwards (a path can be swapped for a symlink between bind and chmod):
 * Linux creates the socket file with 0777 & ~umask (net/unix/af_unix.c,
 * unix_bind_bsd) and the caller's effective gid, while fchmod/fchown on a
 * socket descriptor change the socket inode, not the file. */
static int endpoint_bind(uv_pipe_t *pipe, const char *path)
{
    struct group *g = getgrnam(ADMIN_GROUP);
    gid_t egid = getegid();
    int regid = geteuid() == 0 && g && g->gr_gid != egid && setegid(g->gr_gid) == 0;
    mode_t old = umask(0117); /* 0660 */
    int rc = uv_pipe_bind(pipe, path);
    umask(old);
    if (regid && setegid(egid) != 0) {
        log_error("cannot restore the effective group %u: %s", (unsigned)egid, strerror(errno));
        return UV_EPERM;
    }
    return rc;
}

static void connection_cb(uv_stream_t *listener, int status)
{
    struct endpoint *ep = listener->data;
    ep->cb(ep->arg, status);
}

static void endpoint_closed_cb(uv_handle_t *h)
{
    ht_free(h->data);
}

int endpoint_listen(uv_loop_t *loop, const char *path, const char *operators,
                    endpoint_connection_cb cb, void *arg, struct endpoint **out, char *err,
                    size_t errsz)
{
    *out = NULL;
    if (operators && *operators) {
        snprintf(
            err, errsz,
            "pipe_operators_group is for Windows: on Unix the operators are group " ADMIN_GROUP);
        return HT_EBADARG;
    }
    int rc = endpoint_prepare(path, err, errsz);
    if (rc != 0)
        return rc;
    struct endpoint *ep = ht_calloc(1, sizeof(*ep));
    if (!ep) {
        snprintf(err, errsz, "cannot listen on %s: %s", path, uv_strerror(UV_ENOMEM));
        return UV_ENOMEM;
    }
    ep->cb = cb;
    ep->arg = arg;
    snprintf(ep->path, sizeof(ep->path), "%s", path); /* endpoint_prepare checked its length */
    uv_pipe_init(loop, &ep->listener, 0);
    ep->listener.data = ep;
    rc = endpoint_bind(&ep->listener, path);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&ep->listener, 128, connection_cb);
    if (rc != 0) {
        snprintf(err, errsz, "cannot listen on %s: %s", path, uv_strerror(rc));
        endpoint_close(ep);
        return rc;
    }
    ep->listening = 1;
    *out = ep;
    return 0;
}

int endpoint_accept(struct endpoint *ep, uv_pipe_t *client)
{
    return uv_accept((uv_stream_t *)&ep->listener, (uv_stream_t *)client);
}

void endpoint_close(struct endpoint *ep)
{
    uv_close((uv_handle_t *)&ep->listener, endpoint_closed_cb);
    if (ep->listening) {
        unlink(ep->path);
        ep->listening = 0;
    }
}

static int in_admin_group(uid_t uid, gid_t gid)
{
    struct group *g = getgrnam(ADMIN_GROUP);
    if (!g)
        return 0;
    if (gid == g->gr_gid)
        return 1;
    gid_t admin = g->gr_gid; /* g is getgrnam's static storage: getgrouplist reuses it */
    struct passwd *pw = getpwuid(uid);
    if (!pw)
        return 0;
    /* All of the user's groups: getgrouplist answers -1 when they do not
     * fit, with how many there are in n (getgrouplist(3)). */
    int n = 256, found = 0;
    gid_t *groups = ht_malloc(sizeof(gid_t) * (size_t)n);
    if (groups && getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0 && n > 256) {
        ht_free(groups);
        groups = ht_malloc(sizeof(gid_t) * (size_t)n);
        if (groups && getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0)
            n = 0;
    }
    for (int i = 0; groups && i < n && !found; i++)
        found = groups[i] == admin;
    ht_free(groups);
    return found;
}

int endpoint_headroom(uv_pipe_t *pipe)
{
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)pipe, &fd) != 0)
        return 0;
    int probe = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (probe >= 0) {
        close(probe);
        return 0;
    }
    return errno == EMFILE ? UV_EMFILE : errno == ENFILE ? UV_ENFILE : 0;
}

/* Linux gives a new descriptor the lowest number free (fs/file.c
 * alloc_fd), so every one below h's is taken. */
int endpoint_in_reserve(uv_handle_t *h, unsigned reserve)
{
    uv_os_fd_t fd;
    struct rlimit rl;
    if (uv_fileno(h, &fd) != 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 ||
        rl.rlim_cur == RLIM_INFINITY)
        return 0;
    return (rlim_t)fd + reserve >= rl.rlim_cur;
}

int endpoint_try_write(uv_pipe_t *client, const char *buf, size_t n)
{
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)n);
    return uv_try_write((uv_stream_t *)client, &b, 1);
}

int endpoint_admit(uv_pipe_t *pipe, uint32_t *uid, char *err, size_t errsz)
{
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)pipe, &fd) != 0) {
        snprintf(err, errsz, "cannot read the peer's credentials");
        return HT_EPERM;
    }
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        snprintf(err, errsz, "SO_PEERCRED: %s", strerror(errno));
        return HT_EPERM;
    }
    /* Root, the daemon's own user, and members of the heaptrace group. */
    *uid = cred.uid;
    if (cred.uid == 0 || cred.uid == geteuid() || in_admin_group(cred.uid, cred.gid))
        return 0;
    snprintf(err, errsz, "uid %u (pid %d) is not root or in group " ADMIN_GROUP, (unsigned)cred.uid,
             (int)cred.pid);
    return HT_EPERM;
}

int endpoint_peer_pid(uv_pipe_t *client, uint64_t *pid)
{
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    *pid = 0;
    if (uv_fileno((uv_handle_t *)client, &fd) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return -errno;
    *pid = (uint64_t)cred.pid;
    return 0;
}

int endpoint_peer_groups(uv_pipe_t *client, uint32_t *gid, uint32_t *groups, uint32_t cap,
                         uint32_t *n, char *err, size_t errsz)
{
    *n = 0;
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (uv_fileno((uv_handle_t *)client, &fd) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        snprintf(err, errsz, "cannot read the client's credentials");
        return HT_EPERM;
    }
    *gid = cred.gid;
    /* SO_PEERGROUPS (Linux 4.13): the peer's supplementary groups as of its
     * connect; ERANGE when they do not fit, with the size they need
     * (net/core/sock.c, sk_getsockopt). Read in place: a gid_t is 32 bits. */
    _Static_assert(sizeof(gid_t) == sizeof(uint32_t), "gid_t is not 32 bits");
    len = (socklen_t)(sizeof(gid_t) * cap);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
        int e = errno;
        snprintf(err, errsz, "cannot read the client's groups (SO_PEERGROUPS): %s%s", strerror(e),
                 e == ERANGE ? " (more than the daemon takes)" : "");
        return HT_EPERM;
    }
    *n = (uint32_t)(len / sizeof(gid_t));
    return 0;
}

/* Unix endpoint: socket directory and modes, one daemon per socket, SO_PEERCRED admission. */
#define _GNU_SOURCE /* struct ucred */
#include "server.h"

#include "ht-endpoint.h"
#include "ht-error.h"
#include "log.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#define ADMIN_GROUP "heaptrace"

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

int endpoint_prepare(const char *path, char *err, size_t errsz)
{
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errsz, "endpoint path too long: %s", path);
        return HT_EBADARG;
    }
    /* The default directory is ours to create: 0750, group heaptrace. */
    if (strcmp(path, HT_ENDPOINT_DEFAULT) == 0) {
        if (mkdir(HT_ENDPOINT_DIR, 0750) != 0 && errno != EEXIST) {
            snprintf(err, errsz, "cannot create %s: %s", HT_ENDPOINT_DIR, strerror(errno));
            return HT_EPERM;
        }
        struct group *g = getgrnam(ADMIN_GROUP);
        if (chown(HT_ENDPOINT_DIR, 0, g ? g->gr_gid : 0) != 0 || chmod(HT_ENDPOINT_DIR, 0750) != 0)
            log_warn("cannot set owner/mode of %s: %s", HT_ENDPOINT_DIR, strerror(errno));
    }
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
        unlink(path); /* stale socket of a daemon that died */
    }
    return 0;
}

void endpoint_secure(const char *path)
{
    struct group *g = getgrnam(ADMIN_GROUP);
    if (chmod(path, 0660) != 0)
        log_warn("chmod %s: %s", path, strerror(errno));
    if (geteuid() == 0 && chown(path, 0, g ? g->gr_gid : 0) != 0)
        log_warn("chown %s: %s", path, strerror(errno));
}

void endpoint_cleanup(const char *path)
{
    unlink(path);
}

static int in_admin_group(uid_t uid, gid_t gid)
{
    struct group *g = getgrnam(ADMIN_GROUP);
    if (!g)
        return 0;
    if (gid == g->gr_gid)
        return 1;
    struct passwd *pw = getpwuid(uid);
    if (!pw)
        return 0;
    gid_t groups[256];
    int n = 256;
    if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0)
        return 0;
    for (int i = 0; i < n; i++)
        if (groups[i] == g->gr_gid)
            return 1;
    return 0;
}

int endpoint_admit(uv_pipe_t *pipe, char *err, size_t errsz)
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
    if (cred.uid == 0 || cred.uid == geteuid() || in_admin_group(cred.uid, cred.gid))
        return 0;
    snprintf(err, errsz, "uid %u (pid %d) is not root or in group " ADMIN_GROUP, (unsigned)cred.uid,
             (int)cred.pid);
    return HT_EPERM;
}

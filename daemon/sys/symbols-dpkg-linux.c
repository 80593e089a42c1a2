/* Which Debian package installed a file, from dpkg's file lists (the symbolizer's hint). */
#include "symbols-dpkg.h"

#include "procmaps.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Does dpkg's file list at dir/name hold one of the paths (a line each)? */
static int list_has(int dir, const char *name, const char *const *paths, int npaths)
{
    int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    char line[PROCMAPS_PATH_MAX];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        for (int i = 0; i < npaths && !found; i++)
            found = strcmp(line, paths[i]) == 0;
    }
    fclose(f);
    return found;
}

/* The Debian package that installed path, from dpkg's file lists
 * (/var/lib/dpkg/info/PACKAGE[:ARCH].list, one path a line): "" when none.
 * With merged /usr the maps say /usr/lib/... where the list may say /lib/... */
void dpkg_owner(const char *path, char *pkg, size_t sz)
{
    const char *paths[2] = {path, NULL};
    int npaths = 1;
    pkg[0] = 0;
    if (strncmp(path, "/usr/", 5) == 0)
        paths[npaths++] = path + 4;
    int dfd = open("/var/lib/dpkg/info", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".list") != 0)
            continue;
        if (list_has(dirfd(d), de->d_name, paths, npaths)) {
            size_t n = strcspn(de->d_name, ":");
            n = n < len - 5 ? n : len - 5;
            snprintf(pkg, sz, "%.*s", (int)n, de->d_name);
            break;
        }
    }
    closedir(d);
}

/* Which Debian package installed a file (Linux; no network: dpkg's own lists). */
#ifndef HT_SYMBOLS_DPKG_H
#define HT_SYMBOLS_DPKG_H

#include <stddef.h>

/* The package that installed path (its name without ":ARCH") into pkg, ""
 * when none or no dpkg database. Costs one scan of the file lists. */
void dpkg_owner(const char *path, char *pkg, size_t sz);

#endif

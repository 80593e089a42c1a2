/* Writing events as .htev lines (record, export of a session's stream). */
#ifndef HTEV_WRITE_H
#define HTEV_WRITE_H

#include "ht-event.h"

#include <stddef.h>

struct stack_intern;

/* Format one event as a .htev line with its newline into buf. Returns the
 * length, or 0 when buf (at least 256 bytes) is too small. */
size_t htev_format(const struct ht_event *ev, const struct stack_intern *si, char *buf, size_t cap);

#endif

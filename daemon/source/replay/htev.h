/* Parser for one line of a recorded event stream (.htev, JSON Lines: docs/formats.md). */
#ifndef HTEV_H
#define HTEV_H

#include "ht-event.h"

#include <stddef.h>
#include <stdint.h>

struct stack_intern;

#define HTEV_STACK_CACHE 16384 /* 2-way: a stack may sit in slot h or h^1 */
#define HTEV_STACK_CACHE_TEXT 512

struct htev_cache_slot {
    uint64_t hash;
    uint32_t len;
    uint32_t id;
    uint8_t truncated;
    char *text;
};

struct htev_parser {
    struct stack_intern *si; /* frames are interned here (not owned) */
    uint64_t last_t;
    /* Stacks repeat: the raw text of a "stack" array maps straight to its id. */
    struct htev_cache_slot *cache;
    /* Meta of the last "process" event. */
    char name[256];
    char wall[64];
    /* The module event being parsed: its path and build id, interned once
     * the kind is known. */
    char path[4096];
    char build_id[132];
    char err[160];
};

int htev_parser_init(struct htev_parser *p, struct stack_intern *si);
void htev_parser_close(struct htev_parser *p);
/* Parse one line (without its newline). Returns 1 with *ev filled, 0 for a
 * blank line, HT_EBADJSON with p->err set for a malformed one. */
int htev_parse_line(struct htev_parser *p, const char *line, size_t len, struct ht_event *ev);

#endif

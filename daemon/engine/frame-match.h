/* Frame patterns as in xperf's heap actions: "module!symbol", "module!", "symbol",
 * case-insensitive. */
#ifndef FRAME_MATCH_H
#define FRAME_MATCH_H

#include <stddef.h>
#include <stdint.h>

struct stack_intern;

/* Points into the caller's string; module or symbol NULL means "any". */
struct frame_pat {
    const char *module;
    size_t mlen;
    const char *symbol;
    size_t slen;
};

/* Parse a pattern. 0, or HT_EBADARG for an empty pattern or one that is only "!". */
int frame_pat_parse(const char *s, size_t len, struct frame_pat *p);
/* Does frame text "module!symbol" (or "0x..." for an unsymbolized address) match?
 * A module given without an extension also matches the module with one
 * ("memorytestapp!" matches "MemoryTestApp.exe!main"). */
int frame_pat_match(const struct frame_pat *p, const char *frame);
int frame_pat_match_any(const struct frame_pat *ps, unsigned n, const char *frame);
/* Room frame_text needs for a resolved address frame ("module!symbol");
 * shorter buffers get the name cut. */
#define FRAME_TEXT_MAX 512
/* Text of a frame: the interned string, the interner's resolver's name for
 * an address (stack-intern.h), or "0x..." into buf. */
const char *frame_text(const struct stack_intern *si, uint64_t frame, char *buf, size_t bufsz);
/* Length of the module part of a frame text ("" for addresses), and its start. */
size_t frame_module(const char *frame, const char **start);
/* Length of the function a frame text names, "module!symbol" without a
 * call-site offset ("module!symbol+0x1a" names module!symbol), or 0 when it
 * names none (a raw "0x..." address, "module!+0xOFF", "module!"). */
size_t frame_function_len(const char *frame);

#endif

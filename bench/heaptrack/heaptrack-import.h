/*
 * heaptrack's recordings as heaptrace events (the side-by-side benchmark,
 * bench/heaptrack/bench-heaptrack.sh).
 *
 * Input: heaptrack's raw data (`heaptrack --raw`, decompressed: the lines
 * libheaptrack writes, KDE/heaptrack src/track/libheaptrack.cpp), and
 * optionally the same recording interpreted (heaptrack_interpret's output,
 * src/interpret/heaptrack_interpret.cpp) for the frames' names. The raw lines
 * used (all numbers hex, strings "LEN TEXT" with LEN in hex, file format >= 3):
 *   x LEN EXE                        the executable
 *   m 1 -                            the module list follows again (dlopen/dlclose)
 *   m LEN PATH BIAS (VADDR MEMSZ)*   a module: dlpi_addr, then each PT_LOAD segment
 *                                    ("x" as PATH: the executable)
 *   t IP PARENT                      trace node N (numbered from 1 in order): the
 *                                    return address (already minus one) and its
 *                                    caller's node, 0 = none
 *   + SIZE TRACE PTR                 an allocation (realloc is a free then this)
 *   - PTR                            a free
 *   c MS                             milliseconds since the start (every 10 ms)
 * and of the interpreted stream (one "t" per raw "t", in the same order, with
 * the same parent: heaptrack_interpret writes `t IPID PARENT` for each):
 *   s LEN TEXT                       string N (from 1)
 *   i IP MODULE [FUNC [FILE LINE (FUNC FILE LINE)*]]  ip N (from 1): its module and
 *                                    function string ids, then the inlined frames
 *   t IPID PARENT                    the trace node
 * Everything else (v, X, I, R, A, S, a, +, -, #) is skipped.
 *
 * Output (.htevb through htevb_writer): the process (basename of the
 * executable), module_load/module_unload for the module lists, alloc and free
 * events at the last "c" time, stacks innermost first. With the interpreted
 * stream a frame with a function is the name "module!function" (its inlined
 * functions first, innermost first: libbacktrace reports an inlined call
 * before its caller, and heaptrack keeps the first as the frame and the rest as
 * `inlined`); without it, or without a function, the address.
 */
#ifndef HEAPTRACK_IMPORT_H
#define HEAPTRACK_IMPORT_H

#include <stdint.h>
#include <stdio.h>

struct heaptrack_import_stats {
    uint64_t lines, allocs, frees, traces, ips, strings, modules, skipped;
    uint64_t stacks;    /* distinct stacks written */
    uint64_t truncated; /* stacks cut at HT_STACK_MAX_DEPTH */
    uint64_t last_ms;
};

/* Convert raw (and sym, may be NULL) into .htevb on out. pid goes into the
 * process record (the raw data has none; heaptrack's file name does).
 * 0, or -1 with a message in err (line number and why). */
int heaptrack_import(FILE *raw, FILE *sym, FILE *out, uint64_t pid,
                     struct heaptrack_import_stats *st, char *err, size_t errsz);

#endif

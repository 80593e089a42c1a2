/*
 * The replay source (SOURCE_STREAM): a byte stream of .htev or its binary
 * twin, handed over by the session (load), decoded on a thread of its own;
 * the events come back to the loop over an event ring (evring.h). Its ops
 * are source_replay_ops (source.h); this header adds only what tests need.
 */
#ifndef REPLAY_SOURCE_H
#define REPLAY_SOURCE_H

#include "source.h"

#define REPLAY_INPUT_BYTES (4u << 20) /* input ring, loop -> decoder */
#define REPLAY_RING_EVENTS 65536      /* event ring, decoder -> loop */

/* source_replay_ops.open with the two ring sizes given (powers of two; at
 * least 64 KiB and 1024 records): tests use tiny rings to wrap them often. */
int replay_source_open_sized(struct source **out, uv_loop_t *loop, const struct source_params *p,
                             const struct source_sink *sink, size_t input_bytes,
                             uint32_t ring_events, char *err, size_t errsz);

#endif

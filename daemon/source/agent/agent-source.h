/*
 * The agent source (source_agent_ops in sources.def): tests only here, the
 * source itself is reached through source.h. Open without looking for the
 * agent's library (a test process plays the agent), set the session's time
 * origin (CLOCK_MONOTONIC ns; after start), and the socket name and token a
 * test agent presents.
 */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef AGENT_SOURCE_H
#define AGENT_SOURCE_H

#include "source.h"

int agent_source_open_test(struct source **out, uv_loop_t *loop, const struct source_params *p,
                           const struct source_sink *sink, char *err, size_t errsz);
void agent_source_set_t0(struct source *src, uint64_t t0);
const char *agent_source_socket(struct source *src);
const char *agent_source_token(struct source *src);

#endif

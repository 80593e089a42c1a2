/* heaptraced configuration: built-in defaults, overridden by a JSON file. */
#ifndef CONFIG_H
#define CONFIG_H

#include "engine.h"
#include "frame-match.h"

#include <stdint.h>

enum { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

struct ht_config {
    char endpoint[512];
    int log_level;
    char log_file[512];
    uint32_t max_sessions;
    uint32_t max_clients;
    uint64_t client_output_cap;
    uint64_t output_cap_total; /* every client's unread output together */
    uint32_t max_snapshots;
    uint32_t snapshot_top;
    struct engine_limits limits;
    /* Default cull list: pattern texts owned here, and each parsed once. */
    char **cull;
    struct frame_pat *cull_pats;
    unsigned ncull;
};

void config_defaults(struct ht_config *cfg);
/* Overlay a JSON config file. 0, or an error with a message in err. */
int config_load(struct ht_config *cfg, const char *path, char *err, size_t errsz);
/* Read a cull list (one pattern per line, '#' comments) into cfg. */
int config_load_cull_file(struct ht_config *cfg, const char *path, char *err, size_t errsz);
void config_free(struct ht_config *cfg);
int config_log_level(const char *s);

#endif

/* Where the daemon listens: the default control endpoint, overridable for tests. */
#ifndef HT_ENDPOINT_H
#define HT_ENDPOINT_H

#ifdef _WIN32
#define HT_ENDPOINT_DEFAULT "\\\\.\\pipe\\heaptrace"
#else
#define HT_ENDPOINT_DIR "/run/heaptrace"
#define HT_ENDPOINT_DEFAULT HT_ENDPOINT_DIR "/heaptraced.sock"
#endif
#define HT_ENDPOINT_ENV "HEAPTRACE_PIPE"

/* The endpoint: explicit (--pipe), else $HEAPTRACE_PIPE, else the default. */
const char *ht_endpoint(const char *explicit_name);

#endif

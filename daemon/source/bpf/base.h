/* What every part of the eBPF tracer uses (base.c). */
#ifndef HT_BPF_BASE_H
#define HT_BPF_BASE_H

#include <stdint.h>

uint64_t bpf_now_ns(void);
/* libbpf's messages kept: the last warning, for an error message; all of
 * them on stderr with HT_BPF_DEBUG set. */
void bpf_libbpf_log_install(void);
const char *bpf_libbpf_last(void);

#endif

/* record --raw on an ETW source: its records as they came, to the raw tap. */
#include "etw-int.h"
#include "etw-raw.h"
#include "ht-error.h"
#include "rawtap.h"

#include <stdio.h>

void etw_tap_ready(void *arg)
{
    struct etw_source *s = arg;
    if (!s->ended && s->outer.ready)
        s->outer.ready(s->outer.arg);
}

int etw_src_raw_tap(struct source *base, int on, char *err, size_t errsz)
{
    struct etw_source *s = (struct etw_source *)base;
    if (!on) {
        rawtap_off(s->tap, &s->outer);
        return 0;
    }
    if (!s->tap || !s->started || s->left) { /* attached to the hub, or a child fed by its parent */
        snprintf(err, errsz, "this session's ETW sessions are not running: no raw records to come");
        return HT_ESTATE;
    }
    char header[512];
    uv_mutex_lock(&s->stmu);
    uint32_t pid = s->exe_mode ? s->followed_pub : (uint32_t)s->pid;
    size_t hn = etw_raw_header(etw_qpc_freq, s->start_qpc, pid, s->name, header, sizeof(header));
    uv_mutex_unlock(&s->stmu);
    int rc = rawtap_enable(s->tap, 1, header, hn);
    if (rc)
        snprintf(err, errsz, "no memory for the raw record buffer");
    return rc;
}

size_t etw_src_raw_join(struct source *base, char *buf, size_t cap)
{
    struct etw_source *s = (struct etw_source *)base;
    if (!rawtap_on(s->tap))
        return 0;
    rawtap_flush(s->tap, &s->outer); /* the lines from before the newcomer go to the others only */
    return rawtap_header(s->tap, buf, cap);
}

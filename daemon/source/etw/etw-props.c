/* EVENT_TRACE_PROPERTIES as bytes (etw-props.h). */
#include "etw-props.h"

#include <stdio.h>
#include <string.h>

static void put32(uint8_t *b, size_t off, uint32_t v)
{
    b[off] = (uint8_t)v;
    b[off + 1] = (uint8_t)(v >> 8);
    b[off + 2] = (uint8_t)(v >> 16);
    b[off + 3] = (uint8_t)(v >> 24);
}

uint32_t etw_props_u32(const uint8_t *b, size_t off)
{
    return (uint32_t)b[off] | (uint32_t)b[off + 1] << 8 | (uint32_t)b[off + 2] << 16 |
           (uint32_t)b[off + 3] << 24;
}

size_t etw_props_build(uint8_t *buf, size_t cap, const struct etw_session_spec *s, size_t room,
                       char *err, size_t errsz)
{
    size_t nlen = s->name ? strlen(s->name) : 0;
    if (nlen == 0 || nlen > ETW_NAME_MAX) {
        snprintf(err, errsz, "session name must have 1 to %d characters", ETW_NAME_MAX);
        return 0;
    }
    for (size_t i = 0; i < nlen; i++)
        if ((unsigned char)s->name[i] < 0x20 || (unsigned char)s->name[i] > 0x7e) {
            snprintf(err, errsz, "session name must be printable ASCII");
            return 0;
        }
    if (s->npids > ETW_EXT_MAX_PIDS || s->nhooks > ETW_EXT_MAX_HOOKS) {
        snprintf(err, errsz, "at most %d pids and %d stack-walk hooks", ETW_EXT_MAX_PIDS,
                 ETW_EXT_MAX_HOOKS);
        return 0;
    }
    size_t name_off = ETW_PROPS_SIZE, name_end = name_off + 2 * (nlen + 1);
    size_t ext_off = 0, ext_dwords = 0;
    if (s->npids > 0) {
        /* Aligned to 8 (PerfView's SaveExtensions does not align; harmless). */
        ext_off = (name_end + 7) & ~(size_t)7;
        ext_dwords = 1 + (1 + s->npids) + (s->nhooks ? 1 + s->nhooks : 0);
    }
    size_t end = ext_off ? ext_off + 4 * ext_dwords : name_end;
    size_t total = end + room;
    if (total > cap || total > UINT32_MAX || ext_off >= 0x10000) {
        snprintf(err, errsz, "properties need %zu bytes", total);
        return 0;
    }
    memset(buf, 0, total);
    put32(buf, ETW_PROPS_OFF_BUFFER_SIZE, (uint32_t)total);
    /* The GUID struct's memory order: Data1..Data3 little-endian. */
    static const uint8_t order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    for (int i = 0; i < 16; i++)
        buf[ETW_PROPS_OFF_GUID + order[i]] = s->guid->b[i];
    put32(buf, ETW_PROPS_OFF_CLIENT_CONTEXT, 1); /* QPC timestamps (WNODE_HEADER.ClientContext) */
    put32(buf, ETW_PROPS_OFF_WNODE_FLAGS, ETW_WNODE_FLAG_TRACED_GUID);
    put32(buf, ETW_PROPS_OFF_BUFFER_KB, s->buffer_kb);
    put32(buf, ETW_PROPS_OFF_MIN_BUFFERS, s->min_buffers);
    put32(buf, ETW_PROPS_OFF_MAX_BUFFERS, s->max_buffers);
    put32(buf, ETW_PROPS_OFF_LOG_FILE_MODE, s->log_file_mode);
    put32(buf, ETW_PROPS_OFF_FLUSH_TIMER, s->flush_timer_s);
    put32(buf, ETW_PROPS_OFF_LOGGER_NAME, (uint32_t)name_off);
    for (size_t i = 0; i < nlen; i++) {
        buf[name_off + 2 * i] = (uint8_t)s->name[i];
        buf[name_off + 2 * i + 1] = 0;
    }
    if (!ext_off) {
        put32(buf, ETW_PROPS_OFF_ENABLE_FLAGS, s->enable_flags);
        return total;
    }
    /* TRACE_ENABLE_FLAG_EXTENSION: Offset (USHORT), Length 0xFF, Flag 0x80. */
    put32(buf, ETW_PROPS_OFF_ENABLE_FLAGS, 0x80FF0000u | (uint32_t)ext_off);
    size_t o = ext_off;
    /* Header: Length = every DWORD of the block with itself, Items. */
    put32(buf, o, (uint32_t)ext_dwords | (uint32_t)(s->nhooks ? 2 : 1) << 16);
    o += 4;
    /* Each item: Offset = its DWORDs with its header, Type; then the data. */
    put32(buf, o, (uint32_t)(1 + s->npids) | 2u << 16); /* ETW_EXT_PIDS */
    o += 4;
    for (unsigned i = 0; i < s->npids; i++, o += 4)
        put32(buf, o, s->pids[i]);
    if (s->nhooks) {
        put32(buf, o, (uint32_t)(1 + s->nhooks) | 3u << 16); /* ETW_EXT_STACKWALK_FILTER */
        o += 4;
        for (unsigned i = 0; i < s->nhooks; i++, o += 4)
            put32(buf, o, s->hooks[i]);
    }
    return total;
}

/* XPRESS ("Plain LZ77") decompression, written from the algorithm of [MS-XCA] section 2.4
 * (Microsoft Open Specifications, "Xpress Compression Algorithm"): the format Windows uses for
 * the buffers of compressed (relogged) .etl files, COMPRESSION_FORMAT_XPRESS = 3. */
#include "etl-xpress.h"

#include <string.h>

struct xp {
    const uint8_t *in;
    size_t inlen, ip;
    size_t
        half; /* [MS-XCA] LastLengthHalfByte: 0 when no nibble is pending (byte 0 is a flag word) */
};

static int xp_u8(struct xp *x, uint32_t *v)
{
    if (x->ip + 1 > x->inlen)
        return ETL_XPRESS_ETRUNC;
    *v = x->in[x->ip++];
    return 0;
}

static int xp_u16(struct xp *x, uint32_t *v)
{
    if (x->ip + 2 > x->inlen)
        return ETL_XPRESS_ETRUNC;
    *v = (uint32_t)x->in[x->ip] | (uint32_t)x->in[x->ip + 1] << 8;
    x->ip += 2;
    return 0;
}

static int xp_u32(struct xp *x, uint32_t *v)
{
    uint32_t lo, hi;
    int rc = xp_u16(x, &lo);
    if (rc == 0)
        rc = xp_u16(x, &hi);
    *v = lo | hi << 16;
    return rc;
}

/* The length of a match whose 3-bit length field is 7 ([MS-XCA] 2.4: a nibble shared by two
 * matches, then a byte, then a u16, then a u32); returns the length before the +3. */
static int xp_long_length(struct xp *x, uint64_t *len)
{
    uint32_t v;
    int rc;
    if (x->half == 0) {
        if ((rc = xp_u8(x, &v)) < 0)
            return rc;
        x->half = x->ip - 1;
        v &= 15;
    } else {
        v = x->in[x->half] >> 4;
        x->half = 0;
    }
    if (v == 15) {
        if ((rc = xp_u8(x, &v)) < 0)
            return rc;
        if (v == 255) {
            if ((rc = xp_u16(x, &v)) < 0)
                return rc;
            if (v == 0 && (rc = xp_u32(x, &v)) < 0)
                return rc;
            /* The u16/u32 forms hold the whole length minus 3; [MS-XCA] refuses values
             * below 15 + 7, which the shorter forms encode. */
            if (v < 15 + 7)
                return ETL_XPRESS_ETRUNC;
            *len = v;
            return 0;
        }
        v += 15;
    }
    *len = (uint64_t)v + 7;
    return 0;
}

/* The run of literals whose flags are the zero bits from bit *nflags down, copied at once
 * (byte by byte, each literal was a fifth of an XPRESS load, perf): 1 to go on with *nflags
 * at the run's last flag, else what the decoder returns (the output's length when the input
 * ends inside the run, or EOVERRUN), as one literal at a time would. */
static int64_t literals(struct xp *x, uint32_t flags, uint32_t *nflags, uint8_t *out, size_t outcap,
                        size_t *op)
{
    uint32_t rest = *nflags == 31 ? flags : flags & ((1u << (*nflags + 1)) - 1);
    size_t run = rest ? *nflags - (31 - (uint32_t)__builtin_clz(rest)) : *nflags + 1;
    size_t n = x->inlen - x->ip < run ? x->inlen - x->ip : run;
    size_t room = outcap - *op;
    memcpy(out + *op, x->in + x->ip, n < room ? n : room);
    if (n > room) {
        *op = outcap;
        return ETL_XPRESS_EOVERRUN;
    }
    *op += n;
    x->ip += n;
    if (n < run || n == 0)
        return (int64_t)*op; /* the input ended inside the run */
    *nflags -= (uint32_t)(n - 1);
    return 1;
}

int64_t etl_xpress_decode(const uint8_t *in, size_t inlen, uint8_t *out, size_t outcap)
{
    struct xp x = {in, inlen, 0, 0};
    size_t op = 0;
    uint32_t flags = 0, nflags = 0;
    for (;;) {
        if (nflags == 0) {
            /* The stream may end right after its last item, before a new flag word. */
            if (x.ip == x.inlen)
                return (int64_t)op;
            if (xp_u32(&x, &flags) < 0)
                return ETL_XPRESS_ETRUNC;
            nflags = 32;
        }
        nflags--;
        if (!(flags >> nflags & 1)) {
            int64_t rc = literals(&x, flags, &nflags, out, outcap, &op);
            if (rc != 1)
                return rc;
            continue;
        }
        if (x.ip == x.inlen)
            return (int64_t)op; /* [MS-XCA] 2.4: the end of the input at a match flag */
        uint32_t mb;
        if (xp_u16(&x, &mb) < 0)
            return ETL_XPRESS_ETRUNC;
        uint64_t len = mb & 7, off = (uint64_t)(mb >> 3) + 1;
        if (len == 7) {
            int rc = xp_long_length(&x, &len);
            if (rc < 0)
                return rc;
        }
        len += 3;
        if (off > op)
            return ETL_XPRESS_EOFFSET;
        if (len > outcap - op)
            return ETL_XPRESS_EOVERRUN;
        /* Byte by byte: a match may overlap its own output (offset < length). */
        for (uint64_t i = 0; i < len; i++, op++)
            out[op] = out[op - off];
    }
}

const char *etl_xpress_strerror(int64_t err)
{
    switch (err) {
    case ETL_XPRESS_ETRUNC:
        return "xpress stream truncated";
    case ETL_XPRESS_EOFFSET:
        return "xpress match before the start of the buffer";
    case ETL_XPRESS_EOVERRUN:
        return "xpress data expands past the buffer's stated size";
    default:
        return "xpress ok";
    }
}

/* XPRESS ("Plain LZ77", [MS-XCA] 2.3-2.4) decompression of compressed .etl buffers. */
#ifndef ETL_XPRESS_H
#define ETL_XPRESS_H

#include <stddef.h>
#include <stdint.h>

/* Why a stream was refused. */
#define ETL_XPRESS_ETRUNC (-1)   /* the input ends inside a flag word, a match or a length */
#define ETL_XPRESS_EOFFSET (-2)  /* a match points before the start of the output */
#define ETL_XPRESS_EOVERRUN (-3) /* the output would pass outcap (more than the stated size) */

/* Inflates in[0..inlen) into out, writing at most outcap bytes: the number of bytes written
 * (>= 0), or one of the negative codes above. Never reads or writes out of bounds. */
int64_t etl_xpress_decode(const uint8_t *in, size_t inlen, uint8_t *out, size_t outcap);

/* The error's name, for reports. */
const char *etl_xpress_strerror(int64_t err);

#endif

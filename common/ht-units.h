/* Sizes and durations as users write them ("2GiB", "250ms") and as tables print them. */
#ifndef HT_UNITS_H
#define HT_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* "4096", "64KiB", "2GiB", "10MB" (decimal), "1.5MiB". 0 or HT_EBADARG. */
int ht_parse_size(const char *s, uint64_t *out);
/* "10s", "1.5s", "250ms", "100us", "42ns", "2m", "1h"; a bare number is seconds.
 * 0 or HT_EBADARG. */
int ht_parse_duration(const char *s, uint64_t *ns);
/* "10.0 MiB", "40 B". */
const char *ht_format_size(uint64_t bytes, char *buf, size_t n);
/* Signed: "-1.0 MiB". */
const char *ht_format_ssize(int64_t bytes, char *buf, size_t n);
/* "12.345s", "250.000ms" style for a time since session start. */
const char *ht_format_time(uint64_t ns, char *buf, size_t n);

#endif

/* Parsing and printing of sizes and durations. */
#include "ht-units.h"

#include "ht-error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A non-negative decimal number with an optional fraction; returns the end. */
static const char *parse_number(const char *s, double *v)
{
    if (!(*s >= '0' && *s <= '9') && *s != '.')
        return NULL;
    char *end;
    *v = strtod(s, &end);
    if (end == s || *v < 0 || isnan(*v) || isinf(*v))
        return NULL;
    return end;
}

struct unit {
    const char *name;
    double mult;
};

static int scaled(const char *s, const struct unit *units, double dflt, double max, uint64_t *out)
{
    double v;
    const char *rest = parse_number(s, &v);
    if (!rest)
        return HT_EBADARG;
    while (*rest == ' ')
        rest++;
    double mult = dflt;
    if (*rest) {
        const struct unit *u = units;
        while (u->name && strcasecmp(u->name, rest) != 0)
            u++;
        if (!u->name)
            return HT_EBADARG;
        mult = u->mult;
    }
    double r = v * mult;
    if (r >= max)
        return HT_EBADARG;
    *out = (uint64_t)(r + 0.5);
    return 0;
}

int ht_parse_size(const char *s, uint64_t *out)
{
    static const struct unit units[] = {{"b", 1},
                                        {"kib", 1024.0},
                                        {"mib", 1048576.0},
                                        {"gib", 1073741824.0},
                                        {"tib", 1099511627776.0},
                                        {"k", 1024.0},
                                        {"m", 1048576.0},
                                        {"g", 1073741824.0},
                                        {"kb", 1e3},
                                        {"mb", 1e6},
                                        {"gb", 1e9},
                                        {"tb", 1e12},
                                        {NULL, 0}};
    return scaled(s, units, 1, 18446744073709551615.0, out);
}

int ht_parse_duration(const char *s, uint64_t *ns)
{
    static const struct unit units[] = {{"ns", 1},     {"us", 1e3},    {"ms", 1e6},
                                        {"s", 1e9},    {"m", 60e9},    {"min", 60e9},
                                        {"h", 3600e9}, {"d", 86400e9}, {NULL, 0}};
    return scaled(s, units, 1e9, 18446744073709551615.0, ns);
}

const char *ht_format_size(uint64_t b, char *buf, size_t n)
{
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (b < 1024) {
        snprintf(buf, n, "%llu B", (unsigned long long)b);
        return buf;
    }
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 6) {
        v /= 1024;
        i++;
    }
    snprintf(buf, n, "%.1f %s", v, names[i]);
    return buf;
}

const char *ht_format_ssize(int64_t b, char *buf, size_t n)
{
    if (b >= 0)
        return ht_format_size((uint64_t)b, buf, n);
    buf[0] = '-';
    ht_format_size((uint64_t)(-(b + 1)) + 1, buf + 1, n - 1);
    return buf;
}

const char *ht_format_time(uint64_t ns, char *buf, size_t n)
{
    snprintf(buf, n, "%llu.%03llus", (unsigned long long)(ns / 1000000000ULL),
             (unsigned long long)(ns / 1000000ULL % 1000));
    return buf;
}

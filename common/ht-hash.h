/* Small, fast non-cryptographic hashing for the engine's tables. */
#ifndef HT_HASH_H
#define HT_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Finalizer with full avalanche (constants from the splitmix64 family). */
static inline uint64_t ht_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static inline uint64_t ht_hash_bytes(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ ht_mix64(w)) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
        b += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, b, n);
    h ^= ht_mix64(w ^ n);
    return ht_mix64(h);
}

#endif

/* A pprof profile (profile.proto) built sample by sample and written gzip'd:
 * what export-pprof.c makes of a query's rows. It knows nothing of sessions:
 * its input is frames (an address, a function's name, a file) and values. */
#ifndef PPROF_H
#define PPROF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The values of a sample, in the order of Go's heap profiles
 * (runtime/pprof writes alloc_objects, alloc_space, inuse_objects,
 * inuse_space; pprof's -sample_index takes these names). */
enum {
    PPROF_ALLOC_OBJECTS,
    PPROF_ALLOC_SPACE,
    PPROF_INUSE_OBJECTS,
    PPROF_INUSE_SPACE,
    PPROF_NVALUES
};

/* One frame of a sample. has_addr: addr is an instruction address (its
 * Location carries it and the mapping holding it); else the frame is only a
 * name (a recorded stream's, a snapshot's) and its Location has address 0.
 * func: the function's name (NULL: none known, the Location has no Line);
 * file: its source or module file (NULL: unknown). */
struct pprof_frame {
    uint64_t addr;
    int has_addr;
    const char *func;
    const char *file;
};

struct pprof;

struct pprof *pprof_new(void);
void pprof_free(struct pprof *p);
/* The most bytes p may hold while it is built and written (0: no cap):
 * its tables, samples and strings, the encoded profile and its gzip'd
 * bytes, and what pprof_charge adds. A call that would pass it fails with
 * HT_EFULL, nothing more allocated. pool (NULL: none): a counter shared by
 * the profiles made at once, the cap then theirs together; pprof_free gives
 * back what p took of it. */
void pprof_budget(struct pprof *p, uint64_t cap, _Atomic uint64_t *pool);
/* bytes held elsewhere counted in p's budget (a query's rows): 0, or
 * HT_EFULL. */
int pprof_charge(struct pprof *p, uint64_t bytes);
/* The bytes counted so far. */
uint64_t pprof_used(const struct pprof *p);
/* The sample type a reader shows unless asked otherwise (PPROF_*): Go's
 * heap profile says inuse_space (the default here), its allocs profile
 * alloc_space (net/http/pprof serves both from the same data). */
void pprof_default_sample(struct pprof *p, int type);
/* A mapping (an image in memory): [start, limit), file offset of start, its
 * file and build id (either NULL). Mappings are added before the samples, by
 * ascending start. 0, HT_ENOMEM or HT_EFULL (the budget). */
int pprof_mapping(struct pprof *p, uint64_t start, uint64_t limit, uint64_t offset,
                  const char *file, const char *build_id);
/* Locations with an address that no mapping holds (a backend cannot
 * symbolize them; their names stay). */
size_t pprof_unmapped(const struct pprof *p);
/* A sample: n frames, the allocation site first; values v. 0, HT_ENOMEM or
 * HT_EFULL (the budget). */
int pprof_sample(struct pprof *p, const struct pprof_frame *f, unsigned n,
                 const int64_t v[PPROF_NVALUES]);
/* The profile (time_nanos: the window's start, unix ns; duration_nanos its
 * length), protobuf-encoded then gzip'd, into *out (ht_malloc'd, *len
 * bytes). 0, HT_ENOMEM or HT_EFULL (the budget). */
int pprof_write(struct pprof *p, int64_t time_nanos, int64_t duration_nanos, uint8_t **out,
                size_t *len);
/* The profile unzipped (for tests and checks): 0, or HT_EBADARG. */
int pprof_gunzip(const uint8_t *gz, size_t n, uint8_t **out, size_t *len);

#endif

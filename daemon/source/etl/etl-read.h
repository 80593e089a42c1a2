/* Reading Windows .etl files (Event Trace Logs) on any platform, streamed: the buffers by
 * their own sizes, the log-file header, every record header kind, XPRESS buffers, and the
 * per-processor streams merged by timestamp with one buffer per processor in memory. The
 * layouts are those of Geoff Chappell's ETW pages (WMI_BUFFER_HEADER, SYSTEM_TRACE_HEADER,
 * PERFINFO_TRACE_HEADER, EVENT_TRACE_HEADER, EVENT_HEADER, TRACE_LOGFILE_HEADER) and of
 * ntwmi.h (System Informer's phnt): see etl-file.c and etl-record.c. */
#ifndef ETL_READ_H
#define ETL_READ_H

#include <stddef.h>
#include <stdint.h>

/* Error kinds: each is counted, with the file offset of its first occurrence. */
#define ETL_ERRORS(X)                                                                              \
    X(BUFFER_SIZE, "buffer size below its header or zero")                                         \
    X(BUFFER_TRUNCATED, "buffer runs past the end of the file")                                    \
    X(BUFFER_TOO_BIG, "buffer larger than the reader's cap")                                       \
    X(FILLED, "buffer's end of data outside the buffer")                                           \
    X(READ, "read failed")                                                                         \
    X(NO_HEADER, "no log-file header record in the first buffer")                                  \
    X(HEADER_SHORT, "log-file header shorter than its layout")                                     \
    X(COMPRESSION_FORMAT, "unsupported compression format")                                        \
    X(XPRESS, "xpress stream corrupt")                                                             \
    X(XPRESS_SIZE, "xpress data does not fill the buffer's stated size")                           \
    X(XPRESS_OVERRUN, "xpress data expands past the buffer's stated size")                         \
    X(RECORD_SIZE, "record size below its header or past the buffer's end")                        \
    X(MARKER, "unknown record marker")                                                             \
    X(EXT_ITEMS, "extended data items past the record's end")                                      \
    X(TOO_MANY_BUFFERS, "more buffers than the index cap")                                         \
    X(CPU_RANGE, "processor index above the cap")                                                  \
    X(SEQUENCE, "buffers of one processor with the same sequence number")                          \
    X(MEMORY, "buffer refused: the reader's buffers would pass their memory cap")                  \
    X(BUFFERS_MISSING, "fewer buffers than the header's BuffersWritten: the file was cut")

enum etl_err {
#define X(name, msg) ETL_ERR_##name,
    ETL_ERRORS(X)
#undef X
        ETL_ERR_N
};
const char *etl_err_name(int kind);
const char *etl_err_msg(int kind);

/* Record header types (byte 2 of the first dword when its top two bits are set: ntwmi.h
 * TRACE_HEADER_TYPE_*). "32"/"64" is the pointer size of that record's payload. */
enum etl_hdr {
    ETL_HDR_SYSTEM32 = 0x01,
    ETL_HDR_SYSTEM64 = 0x02,
    ETL_HDR_COMPACT32 = 0x03,
    ETL_HDR_COMPACT64 = 0x04,
    ETL_HDR_FULL32 = 0x0A,
    ETL_HDR_INSTANCE32 = 0x0B,
    ETL_HDR_TIMED = 0x0C,
    ETL_HDR_ERROR = 0x0D,
    ETL_HDR_WNODE = 0x0E,
    ETL_HDR_MESSAGE = 0x0F,
    ETL_HDR_PERFINFO32 = 0x10,
    ETL_HDR_PERFINFO64 = 0x11,
    ETL_HDR_EVENT32 = 0x12,
    ETL_HDR_EVENT64 = 0x13,
    ETL_HDR_FULL64 = 0x14,
    ETL_HDR_INSTANCE64 = 0x15,
    ETL_HDR_WPP = 0x100, /* not a header type: a WPP/TraceMessage record (top bits 10) */
};
const char *etl_hdr_name(unsigned kind);

#define ETL_NONE 0xFFFFFFFFu /* no thread or process id in this header kind */

/* One record, as the walker yields it. payload points into the reader's buffer: valid
 * until the callback returns. */
struct etl_record {
    unsigned kind;     /* enum etl_hdr */
    unsigned ptr_size; /* 4 or 8 by the header type; 0 when the type does not say */
    int has_guid;      /* GUID-style (classic/manifest) record, else a HookId (kernel) one */
    uint16_t hook;     /* kernel records: Group << 8 | Type (ntwmi.h PERFINFO_LOG_TYPE_*) */
    uint8_t guid[16];  /* provider GUID as stored (little-endian Data1..3) */
    uint8_t opcode;    /* kernel: the HookId's low byte; classic: Class.Type; manifest: Opcode */
    uint16_t id;       /* manifest: EVENT_DESCRIPTOR.Id; 0 otherwise */
    uint16_t version;
    uint32_t tid, pid; /* ETL_NONE when the header has none */
    uint64_t ts;       /* raw clock (header's ClockType) */
    uint16_t cpu;
    const uint8_t *payload;
    uint32_t len;
    const uint8_t *ext; /* EVENT_HEADER extended items (their own headers included), or NULL */
    uint32_t ext_len;
    uint64_t off; /* file offset of the record (its buffer's, plus the offset in it) */
};

/* Parses the record at p (avail bytes to the end of valid data). Returns its size (header
 * included, before alignment), 0 at the end of data (padding), or -(1 + enum etl_err). */
int etl_record_parse(const uint8_t *p, size_t avail, struct etl_record *r);

/* TRACE_LOGFILE_HEADER, from the first record of the first buffer. */
struct etl_header {
    uint32_t buffer_size, provider_version, ncpus, log_file_mode, buffers_written;
    uint32_t pointer_size, events_lost, buffers_lost, clock_type, timer_resolution;
    uint8_t version[4];
    uint64_t end_time, boot_time, perf_freq, start_time; /* FILETIMEs, and PerfFreq */
    uint64_t ts0;         /* the header record's own timestamp (the clock at StartTime) */
    uint32_t compression; /* the first buffer's State low 16 bits when compressed, else 0 */
};

/* Input: a file read by offset (the reader never holds more than its window). */
typedef int64_t (*etl_read_fn)(void *arg, uint64_t off, void *buf, size_t n);

struct etl_limits {
    uint32_t max_buffer;  /* bytes of one buffer, stored or inflated (default 64 MiB) */
    uint32_t max_buffers; /* entries of the buffer index (default 1 << 22) */
    uint32_t max_cpus;    /* processor streams (default 2048: ntwmi.h PROC_INDEX is 11 bits) */
    uint64_t max_memory;  /* all buffers held at once (default 256 MiB) */
};

struct etl_counts {
    uint64_t buffers, compressed, bytes_inflated;
    uint64_t flag_events_lost, flag_buffer_lost; /* BufferFlag 0x02 / 0x04 */
    uint64_t buffers_skipped;                    /* refused (an error says why) */
    uint64_t tail_data; /* uncompressed buffers with bytes other than 0xFF past their end */
    uint64_t backwards; /* records earlier than the one before them on their processor: the
                         * merge by time cannot put them in order (0 in every real trace) */
    uint64_t records, by_kind[0x17]; /* by enum etl_hdr, WPP in [0x16] */
    uint64_t ptr32, ptr64;
    uint64_t err[ETL_ERR_N], err_first[ETL_ERR_N];
};

struct etl_reader;
typedef void (*etl_record_fn)(void *arg, const struct etl_record *r);

/* A reader of size bytes through fn; lim may be NULL (defaults). 0, or -ENOMEM. */
int etl_reader_new(struct etl_reader **out, etl_read_fn fn, void *arg, uint64_t size,
                   const struct etl_limits *lim);
void etl_reader_free(struct etl_reader *r);
/* The file mapped whole at base (the size given to etl_reader_new): uncompressed buffers are
 * parsed in place instead of copied (compressed ones are still read, then inflated); done,
 * if not NULL, is told (arg, offset, bytes) when the reader leaves a buffer it read in place,
 * so that the owner can drop its pages. Before etl_reader_run. */
typedef void (*etl_done_fn)(void *arg, uint64_t off, uint32_t n);
void etl_reader_map(struct etl_reader *r, const uint8_t *base, etl_done_fn done, void *arg);
/* Indexes the buffers and reads the log-file header. 0, or -1 when the file is not an .etl
 * that can be read (the counts say why: NO_HEADER, COMPRESSION_FORMAT, ...). */
int etl_reader_open(struct etl_reader *r);
const struct etl_header *etl_reader_header(const struct etl_reader *r);
/* Every record in global time order (per processor by SequenceNumber, merged by timestamp).
 * 0, or -ENOMEM. Bad buffers and records are counted and skipped. */
int etl_reader_run(struct etl_reader *r, etl_record_fn fn, void *arg);
/* Every record, one processor's stream after the other (each in its own order, no merge by
 * time): for a pass that needs no order, such as listing processes. 0, or -ENOMEM. */
int etl_reader_scan(struct etl_reader *r, etl_record_fn fn, void *arg);
const struct etl_counts *etl_reader_counts(const struct etl_reader *r);
/* Back to the start for another run (the counts as they were after open). */
void etl_reader_rewind(struct etl_reader *r);
/* Counts an error at off (first offset kept). */
void etl_reader_error(struct etl_reader *r, int kind, uint64_t off);

#endif

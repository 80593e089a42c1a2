/* Error codes: libuv's UV_E* for system errors plus a small HT_E* range for domain errors. */
#ifndef HT_ERROR_H
#define HT_ERROR_H

/*
 * Domain errors, declared once: the enum, the stable protocol code and the
 * human message all come from this map (after libuv's UV_ERRNO_MAP).
 * Values sit far below libuv's range so the two never collide.
 */
#define HT_ERROR_MAP(X)                                                                            \
    X(BADARG, -30001, "EBADARG", "invalid argument")                                               \
    X(BADJSON, -30002, "EBADJSON", "malformed JSON request")                                       \
    X(TOOBIG, -30003, "ETOOBIG", "request too large")                                              \
    X(UNKNOWNCMD, -30004, "EUNKNOWNCMD", "unknown command")                                        \
    X(NOSESSION, -30005, "ENOSESSION", "no such session")                                          \
    X(AMBIGUOUS, -30006, "EAMBIGUOUS", "session must be named: more than one exists")              \
    X(VERSION, -30007, "EVERSION", "protocol version mismatch")                                    \
    X(NOTSUP, -30008, "ENOTSUP", "not supported by this build/platform yet")                       \
    X(FULL, -30009, "EFULL", "limit reached")                                                      \
    X(EXIST, -30010, "EEXIST", "already exists")                                                   \
    X(NOMARK, -30011, "ENOMARK", "no such mark")                                                   \
    X(STATE, -30012, "ESTATE", "not possible in the session's state")                              \
    X(PERM, -30013, "EPERM", "permission denied")                                                  \
    X(NOMEM, -30014, "ENOMEM", "out of memory")                                                    \
    X(INTERNAL, -30015, "EINTERNAL", "internal error")

enum {
#define X(name, val, code, msg) HT_E##name = val,
    HT_ERROR_MAP(X)
#undef X
};

/* Stable code for the protocol ("EBADARG"); falls back to libuv's name. */
const char *ht_err_code(int err);
/* Human message for err. */
const char *ht_strerror(int err);

#endif

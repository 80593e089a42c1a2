/* Names and messages of error codes. */
#include "ht-error.h"

#include <uv.h>

const char *ht_err_code(int err)
{
    switch (err) {
#define X(name, val, code, msg)                                                                    \
    case val:                                                                                      \
        return code;
        HT_ERROR_MAP(X)
#undef X
    }
    return uv_err_name(err);
}

const char *ht_strerror(int err)
{
    switch (err) {
#define X(name, val, code, msg)                                                                    \
    case val:                                                                                      \
        return msg;
        HT_ERROR_MAP(X)
#undef X
    }
    return uv_strerror(err);
}

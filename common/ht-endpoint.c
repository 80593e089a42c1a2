/* Endpoint selection shared by daemon and ctl. */
#include "ht-endpoint.h"

#include <stdlib.h>

const char *ht_endpoint(const char *explicit_name)
{
    if (explicit_name && *explicit_name)
        return explicit_name;
    const char *env = getenv(HT_ENDPOINT_ENV);
    if (env && *env)
        return env;
    return HT_ENDPOINT_DEFAULT;
}

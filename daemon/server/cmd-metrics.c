/* metrics: the Prometheus exposition GET /metrics serves (metrics.c), as
 * lines, so a long one is cut into frames like any reply. */
#include "commands.h"

#include "ht-error.h"
#include "metrics.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

int cmd_metrics(struct cmd_ctx *ctx)
{
    char *text = NULL;
    size_t n = 0;
    if (metrics_render(ctx->srv, &text, &n) != 0)
        return cmd_error(ctx, HT_ENOMEM, "out of memory making the metrics");
    cJSON *d = cJSON_CreateObject();
    cJSON *lines = d ? cJSON_AddArrayToObject(d, "lines") : NULL;
    int ok = lines != NULL;
    for (char *p = text, *nl; ok && p < text + n; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl)
            nl = text + n;
        *nl = '\0';
        cJSON *s = cJSON_CreateString(p);
        ok = s && cJSON_AddItemToArray(lines, s);
    }
    free(text);
    if (!ok) {
        cJSON_Delete(d);
        return cmd_error(ctx, HT_ENOMEM, "out of memory making the metrics");
    }
    return cmd_reply(ctx, d);
}

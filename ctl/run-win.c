/* run on Windows: the source starts the program itself (ETW); the reply is shown as for start. */
#include "ctl.h"

#include <cjson/cJSON.h>

int ctl_run(struct ctl *c)
{
    cJSON *data = NULL;
    int rc = ctl_call(c, c->cmd->name, c->args, &data);
    c->args = NULL;
    if (rc == 0)
        render_reply(c, data);
    cJSON_Delete(data);
    return rc;
}

/* commits: VirtualAlloc/mmap commit lifetimes over a window (WPA's Commit Lifetimes table). */
#include "commands.h"

#include "query.h"

int cmd_commits(struct cmd_ctx *ctx)
{
    return cmd_query_domain(ctx, HT_DOM_COMMIT);
}

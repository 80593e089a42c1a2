/* ht-etw-synth FILE.htev: the raw ETW record stream (etw-raw.h) the Windows
 * sessions would have delivered for that recording, on stdout (tests/etw-synth.h). */
#include "etw-synth.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ht-etw-synth FILE.htev > FILE.etwraw\n");
        return 2;
    }
    struct text raw = {0};
    uint64_t t_end = 0;
    int rc = htev_to_raw(argv[1], &raw, &t_end);
    if (rc != 0) {
        fprintf(stderr, "ht-etw-synth: %s: %s\n", argv[1],
                rc == -1 ? "cannot open" : rc == -2 ? "times not in 100 ns ticks" : "no process line");
        return 1;
    }
    int ok = fwrite(raw.s, 1, raw.n, stdout) == raw.n && fflush(stdout) == 0;
    free(raw.s);
    return ok ? 0 : 1;
}

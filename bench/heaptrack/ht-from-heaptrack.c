/*
 * ht-from-heaptrack: a heaptrack recording as .htevb (heaptrack-import.h).
 *   ht-from-heaptrack [--pid N] RAW [INTERPRETED] OUT.htevb
 * RAW: `heaptrack --raw`'s file; INTERPRETED: the same recording through
 * heaptrack_interpret (frames get names from it). A path ending in .zst or
 * .gz is read through `zstd -dc` / `gzip -dc` (heaptrack writes either);
 * "-" is stdin (RAW) or stdout (OUT). Prints what it converted on stderr.
 */
#include "heaptrack-import.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A file, through its decompressor when its name says so (*piped set). */
static FILE *open_input(const char *path, int *piped)
{
    *piped = 0;
    if (strcmp(path, "-") == 0)
        return stdin;
    const char *tool = ends_with(path, ".zst")  ? "zstd -dcq"
                       : ends_with(path, ".gz") ? "gzip -dc"
                                                : NULL;
    if (!tool)
        return fopen(path, "r");
    /* The path single-quoted for sh: each ' becomes '\''. */
    size_t n = strlen(path);
    char *cmd = malloc(strlen(tool) + 4 * n + 8);
    if (!cmd)
        return NULL;
    char *p = cmd + sprintf(cmd, "%s '", tool);
    for (size_t i = 0; i < n; i++) {
        if (path[i] == '\'') {
            memcpy(p, "'\\''", 4);
            p += 4;
        } else {
            *p++ = path[i];
        }
    }
    strcpy(p, "'");
    FILE *f = popen(cmd, "r");
    free(cmd);
    *piped = 1;
    return f;
}

/* The importer stops reading the interpreted stream after its last trace
 * node: the rest is read here, so its decompressor ends normally (not
 * killed by a closed pipe, which would read as a truncated file). */
static int close_input(FILE *f, int piped)
{
    if (f == stdin)
        return 0;
    if (!piped)
        return fclose(f);
    static char sink[1 << 16];
    while (fread(sink, 1, sizeof(sink), f) > 0)
        ;
    return pclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    uint64_t pid = 0;
    int a = 1;
    if (a + 1 < argc && strcmp(argv[a], "--pid") == 0) {
        pid = strtoull(argv[a + 1], NULL, 10);
        a += 2;
    }
    int nargs = argc - a;
    if (nargs != 2 && nargs != 3) {
        fprintf(stderr, "usage: ht-from-heaptrack [--pid N] RAW [INTERPRETED] OUT.htevb\n");
        return 2;
    }
    const char *raw_path = argv[a], *sym_path = nargs == 3 ? argv[a + 1] : NULL;
    const char *out_path = argv[argc - 1];
    int raw_piped = 0, sym_piped = 0;
    FILE *raw = open_input(raw_path, &raw_piped);
    FILE *sym = sym_path ? open_input(sym_path, &sym_piped) : NULL;
    FILE *out = strcmp(out_path, "-") ? fopen(out_path, "wb") : stdout;
    if (!raw || (sym_path && !sym) || !out) {
        perror(!raw ? raw_path : !out ? out_path : sym_path);
        return 1;
    }
    static char buf[1 << 20];
    setvbuf(out, buf, _IOFBF, sizeof(buf));
    struct heaptrack_import_stats st;
    char err[512] = "";
    int rc = heaptrack_import(raw, sym, out, pid, &st, err, sizeof(err));
    if (out != stdout && fclose(out) != 0 && rc == 0) {
        perror(out_path);
        rc = -1;
    }
    /* A decompressor that failed (a truncated file) fails the conversion. */
    if (close_input(raw, raw_piped) != 0 && rc == 0) {
        snprintf(err, sizeof(err), "%s: reading failed", raw_path);
        rc = -1;
    }
    if (sym && close_input(sym, sym_piped) != 0 && rc == 0) {
        snprintf(err, sizeof(err), "%s: reading failed", sym_path);
        rc = -1;
    }
    fprintf(stderr,
            "{\"lines\":%" PRIu64 ",\"allocs\":%" PRIu64 ",\"frees\":%" PRIu64
            ",\"traces\":%" PRIu64 ",\"ips\":%" PRIu64 ",\"strings\":%" PRIu64
            ",\"modules\":%" PRIu64 ",\"stacks\":%" PRIu64 ",\"truncated_stacks\":%" PRIu64
            ",\"last_ms\":%" PRIu64 "}\n",
            st.lines, st.allocs, st.frees, st.traces, st.ips, st.strings, st.modules, st.stacks,
            st.truncated, st.last_ms);
    if (rc != 0) {
        fprintf(stderr, "ht-from-heaptrack: %s\n", err);
        return 1;
    }
    return 0;
}

/*
 * Loading the agent (inject-linux.c): every reason a target cannot take it,
 * found before anything touches the process (its executable, its status, its
 * libc and loader, the agent's file as the target sees it).
 */
#define _GNU_SOURCE
#include "inject-int.h"

/* Symbol values of a file's .dynsym by name (0: absent or undefined). */
static int dynsym_find(int fd, const char *const *names, uint64_t *vals, unsigned n)
{
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    if (!e)
        return -1;
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym s;
            if (!gelf_getsym(d, (int)i, &s) || s.st_shndx == SHN_UNDEF || !s.st_value)
                continue;
            const char *nm = elf_strptr(e, sh.sh_link, s.st_name);
            for (unsigned k = 0; nm && k < n; k++)
                if (!vals[k] && strcmp(nm, names[k]) == 0)
                    vals[k] = s.st_value;
        }
    }
    elf_end(e);
    return 0;
}

/* The executable: 64-bit x86-64, dynamically linked, and not defining
 * malloc itself (its own calls would then reach it through no slot). */
int inj_exe_check(uint64_t pid, char *err, size_t errsz)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%llu/exe", (unsigned long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errsz, "cannot read process %llu's executable: %s", (unsigned long long)pid,
                 strerror(errno));
        return errno == ENOENT ? UV_ESRCH : HT_EPERM;
    }
    unsigned char id[EI_NIDENT];
    int rc = 0;
    if (pread(fd, id, sizeof(id), 0) != (ssize_t)sizeof(id) || memcmp(id, ELFMAG, SELFMAG) != 0) {
        snprintf(err, errsz, "process %llu's executable is not ELF", (unsigned long long)pid);
        rc = HT_ENOTSUP;
    } else if (id[EI_CLASS] != ELFCLASS64) {
        snprintf(err, errsz,
                 "process %llu is a 32-bit program: the agent attaches to 64-bit x86-64 "
                 "programs only (heaptracectl start --pid N --source bpf traces it)",
                 (unsigned long long)pid);
        rc = HT_ENOTSUP;
    }
    elf_version(EV_CURRENT);
    Elf *e = rc ? NULL : elf_begin(fd, ELF_C_READ, NULL);
    GElf_Ehdr eh;
    if (!rc && (!e || !gelf_getehdr(e, &eh) || eh.e_machine != EM_X86_64)) {
        snprintf(err, errsz,
                 "process %llu is not an x86-64 program: the agent attaches to "
                 "x86-64 programs only",
                 (unsigned long long)pid);
        rc = HT_ENOTSUP;
    }
    int interp = 0;
    size_t nph = 0;
    if (!rc && elf_getphdrnum(e, &nph) == 0)
        for (size_t i = 0; i < nph; i++) {
            GElf_Phdr ph;
            if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_INTERP)
                interp = 1;
        }
    if (e)
        elf_end(e);
    if (!rc && !interp) {
        snprintf(err, errsz,
                 "process %llu is statically linked: no dynamic loader to load the agent and "
                 "no PLT slot to redirect (heaptracectl start --pid N --source bpf traces it)",
                 (unsigned long long)pid);
        rc = HT_ENOTSUP;
    }
    static const char *const mal[] = {"malloc"};
    uint64_t v = 0;
    if (!rc && dynsym_find(fd, mal, &v, 1) == 0 && v) {
        snprintf(err, errsz,
                 "process %llu's allocator is linked statically into its executable (it "
                 "defines malloc): its own calls go through no PLT slot the agent could "
                 "redirect (heaptracectl start --pid N --source bpf traces it)",
                 (unsigned long long)pid);
        rc = HT_ENOTSUP;
    }
    close(fd);
    return rc;
}

/* /proc/PID/status: another tracer, a seccomp filter. */
int inj_status_check(uint64_t pid, int *filtered, char *err, size_t errsz)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%llu/status", (unsigned long long)pid);
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errsz, "no process %llu", (unsigned long long)pid);
        return UV_ESRCH;
    }
    long tracer = 0, seccomp = 0;
    while (fgets(line, sizeof(line), f)) {
        sscanf(line, "TracerPid: %ld", &tracer);
        sscanf(line, "Seccomp: %ld", &seccomp);
    }
    fclose(f);
    /* Ourselves: a process inject_hold stopped (start --exe). */
    if (tracer && tracer != (long)getpid() && tracer != (long)gettid()) {
        snprintf(err, errsz,
                 "process %llu is already traced by process %ld (a debugger or strace): a "
                 "process has one tracer at a time (ptrace(2)); the agent cannot be loaded",
                 (unsigned long long)pid, tracer);
        return UV_EBUSY;
    }
    /* Strict mode allows none of the calls loading the agent makes; a
     * filter is read and run once a thread is stopped (inject-seccomp-linux.c). */
    if (seccomp == 1) {
        snprintf(err, errsz,
                 "process %llu runs under seccomp strict mode: none of the calls loading the "
                 "agent makes is allowed (heaptracectl start --pid N --source bpf traces it)",
                 (unsigned long long)pid);
        return HT_EPERM;
    }
    *filtered = seccomp == 2;
    return 0;
}

const char *inj_base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Code a stopped thread must not be in: it may hold the loader's or the
 * allocator's lock. */
static int unsafe_module(const char *path)
{
    const char *b = inj_base_name(path);
    return !strncmp(b, "libc.so", 7) || !strncmp(b, "ld-linux", 8) || !strncmp(b, "libgcc_s", 8) ||
           !strncmp(b, "libunwind", 9) || strstr(b, "malloc") ||
           !strncmp(b, "libheaptrace-agent", 18);
}

static int libc_of(uint64_t pid, const struct procmaps_module *mods, size_t n, struct target *t,
                   char *err, size_t errsz)
{
    const struct procmaps_module *libc = NULL;
    for (size_t i = 0; i < n; i++) {
        if (unsafe_module(mods[i].path) && t->nunsafe < UNSAFE_MAX) {
            t->unsafe[t->nunsafe][0] = mods[i].start;
            t->unsafe[t->nunsafe++][1] = mods[i].end;
        }
        if (!strcmp(inj_base_name(mods[i].path), "libc.so.6"))
            libc = &mods[i];
    }
    if (!libc) {
        snprintf(err, errsz,
                 "process %llu maps no glibc libc.so.6 (another C library, or none): there is "
                 "no dlopen the agent knows how to call",
                 (unsigned long long)pid);
        return HT_ENOTSUP;
    }
    int fd = procmaps_open_module(pid, libc);
    static const char *const names[] = {"__errno_location", "dlopen", "dlsym", "dlerror"};
    uint64_t v[4] = {0, 0, 0, 0};
    int rc = fd < 0 ? fd : dynsym_find(fd, names, v, 4);
    if (fd >= 0)
        close(fd);
    if (rc != 0 || !v[0] || !v[1] || !v[2] || !v[3]) {
        snprintf(err, errsz,
                 "process %llu's libc (%s) has no dlopen, dlsym, dlerror or __errno_location in "
                 "its dynamic symbols (glibc before 2.34 keeps dlopen in libdl): the agent "
                 "cannot be loaded",
                 (unsigned long long)pid, libc->path);
        return HT_ENOTSUP;
    }
    t->libc_bias = libc->bias;
    t->fn_errno = libc->bias + v[0];
    t->fn_dlopen = libc->bias + v[1];
    t->fn_dlsym = libc->bias + v[2];
    t->fn_dlerror = libc->bias + v[3];
    return 0;
}

/* The agent must be the same file in the target's mount namespace. */
int inj_lib_visible(const struct inject_req *r, char *err, size_t errsz)
{
    char path[4200];
    struct stat a, b;
    snprintf(path, sizeof(path), "/proc/%llu/root%s", (unsigned long long)r->pid, r->lib);
    if (stat(r->lib, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino) {
        snprintf(err, errsz,
                 "the agent library %s is not the same file in process %llu's mount namespace "
                 "(a container): it cannot load it",
                 r->lib, (unsigned long long)r->pid);
        return HT_ENOTSUP;
    }
    return 0;
}

int inj_target_check(const struct inject_req *r, struct target *t, char *err, size_t errsz)
{
    memset(t, 0, sizeof(*t));
    int rc = inj_status_check(r->pid, &t->seccomp, err, errsz);
    if (!rc)
        rc = inj_exe_check(r->pid, err, errsz);
    if (!rc)
        rc = inj_lib_visible(r, err, errsz);
    if (rc)
        return rc;
    struct procmaps_module *mods = NULL;
    size_t n = 0;
    rc = procmaps_modules(r->pid, &mods, &n);
    if (rc != 0) {
        snprintf(err, errsz, "cannot read process %llu's modules: %s", (unsigned long long)r->pid,
                 uv_strerror(rc));
        return rc;
    }
    rc = libc_of(r->pid, mods, n, t, err, errsz);
    ht_free(mods);
    return rc;
}

int inject_check(const struct inject_req *r, char *err, size_t errsz)
{
    struct target t;
    return inj_target_check(r, &t, err, errsz);
}

/*
 * memorytestapp: a Linux port of MemoryTestApp.exe, the program of seed 000
 * ("Exercise 2 - Track User Mode Process Allocations"), scaled from ~30 s to
 * ~3 s. VirtualAlloc(MEM_COMMIT) becomes mmap(PROT_READ|PROT_WRITE,
 * MAP_PRIVATE|MAP_ANONYMOUS), VirtualFree(MEM_RELEASE) munmap, and the heap is
 * C++ new. Same function names as the article (extern "C" so the symbols are
 * exactly these names, without a parameter list).
 *
 * The run is 1200 steps of 2.5 ms:
 *   - main commits 10 MiB at step 2 and keeps it (steady state, 10 MiB);
 *   - main commits another 10 MiB at step 600, halfway, and keeps it (20 MiB);
 *   - Operation1 -> ManipulateTemporaryBuffer commits 10 MiB ten times, at
 *     steps 60 + 120k (k = 0..9), and releases it 10 ms later (the spikes);
 *   - InnerLoopOperation allocates one 40-byte block with new per step, never
 *     freed: 1200 blocks, 48000 bytes;
 *   - Initialize allocates 50 blocks of 1 KiB with new[] at the start; main
 *     frees them at step 20 (transient).
 *
 * Protocol on stdout (one JSON object per line; app-sync.h):
 *   {"pid":N,"ready":true}            wait for the go-signal (SIGUSR1 or a byte on stdin)
 *   {"at":"mid_before",...}           step 580: wait (place a mark, then go)
 *   {"at":"mid_after",...}            step 620: wait
 *   {"at":"spikes_before",...}        step 760, before the last four spikes: wait
 *   {"done":true,...ground truth...}  after step 1200: wait, then exit 0
 * With --no-pause only the ready wait remains and the app exits right after
 * the ground truth (a target that exits during a trace).
 *
 * Built -O1 -g -fno-omit-frame-pointer; every function noinline and every
 * block stored to a volatile sink so no allocation is optimized away.
 */
#include "app-sync.h"

#include <string.h>
#include <sys/mman.h>

static const long STEPS = 1200;
static const long STEP_MS = 2; /* plus the work of the step: ~2.5 ms */
static const size_t MIB = 1u << 20;
static const size_t COMMIT = 10 * MIB;
static const long SPIKE_FIRST = 60, SPIKE_EVERY = 120, SPIKES = 10;
static const long MID_STEP = 600, MID_BEFORE = 580, MID_AFTER = 620, SPIKES_BEFORE = 760;

struct Item {
    char data[40];
};

static void *volatile sink;
static int pause_at_marks = 1;
static long long spike_start_ns[10], spike_end_ns[10];

extern "C" {
__attribute__((noinline)) void Initialize(char **blocks, int n);
__attribute__((noinline)) void InnerLoopOperation(void);
__attribute__((noinline)) void ManipulateTemporaryBuffer(int k);
__attribute__((noinline)) void Operation1(int k);
}

static void *commit_or_die(void *p)
{
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return p;
}

/* 50 blocks of 1 KiB, returned to main, which frees them at step 20. */
extern "C" __attribute__((noinline)) void Initialize(char **blocks, int n)
{
    for (int i = 0; i < n; i++) {
        blocks[i] = new char[1024];
        blocks[i][0] = (char)i;
    }
}

/* One 40-byte block, never freed: the leak of the article's step 3. */
extern "C" __attribute__((noinline)) void InnerLoopOperation(void)
{
    Item *it = new Item;
    it->data[0] = 1;
    sink = it;
}

/* Commit 10 MiB, use it for 10 ms, release it: a transient spike. */
extern "C" __attribute__((noinline)) void ManipulateTemporaryBuffer(int k)
{
    spike_start_ns[k] = app_sync_now_ns();
    char *buf = (char *)commit_or_die(
        mmap(NULL, COMMIT, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    for (size_t off = 0; off < COMMIT; off += 256 * 1024) /* touch a few pages */
        buf[off] = (char)k;
    sink = buf;
    app_sync_sleep_ms(10);
    munmap(buf, COMMIT);
    spike_end_ns[k] = app_sync_now_ns();
}

extern "C" __attribute__((noinline)) void Operation1(int k)
{
    ManipulateTemporaryBuffer(k);
    __asm__ volatile("" ::: "memory"); /* keep the call from becoming a tail call */
}

static void pause_at(const char *name, long step)
{
    app_sync_say("{\"at\":\"%s\",\"step\":%ld,\"t_ns\":%lld}", name, step, app_sync_now_ns());
    if (pause_at_marks)
        app_sync_wait();
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--no-pause"))
        pause_at_marks = 0;
    app_sync_init();
    app_sync_ready();

    char *init_blocks[50];
    Initialize(init_blocks, 50);
    void *steady[2] = {NULL, NULL};
    long long steady_ns[2] = {0, 0};
    int spikes = 0;
    for (long step = 0; step < STEPS; step++) {
        if (step == 2 || step == MID_STEP) {
            int s = step == 2 ? 0 : 1;
            /* main calls mmap itself, as the article's main calls VirtualAlloc. */
            steady_ns[s] = app_sync_now_ns();
            steady[s] = commit_or_die(
                mmap(NULL, COMMIT, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
            ((char *)steady[s])[0] = 1;
            sink = steady[s];
        }
        if (step == 20)
            for (int i = 0; i < 50; i++)
                delete[] init_blocks[i];
        if (step == MID_BEFORE)
            pause_at("mid_before", step);
        if (step == MID_AFTER)
            pause_at("mid_after", step);
        if (step == SPIKES_BEFORE)
            pause_at("spikes_before", step);
        if (step >= SPIKE_FIRST && (step - SPIKE_FIRST) % SPIKE_EVERY == 0 && spikes < SPIKES)
            Operation1(spikes++);
        InnerLoopOperation();
        app_sync_sleep_ms(STEP_MS);
    }

    /* Ground truth: heap blocks by allocating function (requested bytes),
     * commits by the function that called mmap. */
    printf(
        "{\"done\":true,\"pid\":%d,\"t_ns\":%lld,"
        "\"heap\":[{\"site\":\"InnerLoopOperation\",\"count\":%ld,\"bytes\":%ld,\"live_count\":%ld,"
        "\"live_bytes\":%ld},"
        "{\"site\":\"Initialize\",\"count\":50,\"bytes\":51200,\"live_count\":0,\"live_bytes\":0}],"
        "\"commits\":[{\"site\":\"main\",\"count\":2,\"bytes\":%zu,\"live_count\":2,\"live_bytes\":"
        "%zu,\"t_ns\":[%lld,%lld]},"
        "{\"site\":\"ManipulateTemporaryBuffer\",\"count\":%d,\"bytes\":%zu,\"live_count\":0,"
        "\"live_bytes\":0,\"spikes_ns\":[",
        (int)getpid(), app_sync_now_ns(), STEPS, STEPS * (long)sizeof(Item), STEPS,
        STEPS * (long)sizeof(Item), 2 * COMMIT, 2 * COMMIT, steady_ns[0], steady_ns[1], spikes,
        (size_t)spikes * COMMIT);
    for (int k = 0; k < spikes; k++)
        printf("%s[%lld,%lld]", k ? "," : "", spike_start_ns[k], spike_end_ns[k]);
    printf("]}],\"mid_window\":{\"impacting\":%zu,\"site\":\"main\"},"
           "\"last_four_spikes\":{\"count\":4,\"size\":%zu,\"impacting\":0,\"site\":"
           "\"ManipulateTemporaryBuffer\"}}\n",
           COMMIT, 4 * COMMIT);
    fflush(stdout);
    if (pause_at_marks)
        app_sync_wait();
    return 0;
}

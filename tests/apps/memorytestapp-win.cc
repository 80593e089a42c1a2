/*
 * memorytestapp-win: MemoryTestApp.exe of seed 000 ("Exercise 2 - Track User
 * Mode Process Allocations") for Windows, the program the ETW sessions are
 * validated against on a real machine (docs/windows.md#validating-on-real-windows).
 * The same run as tests/apps/memorytestapp.cc, with the article's own calls:
 * VirtualAlloc(MEM_COMMIT | MEM_RESERVE) / VirtualFree(MEM_RELEASE) for the
 * commits and C++ new for the heap, and the same function names (extern "C",
 * so symbols are exactly these names).
 *
 * The run is 1200 steps of 2 ms or a timer tick:
 *   - main commits 10 MiB at step 2 and keeps it; another 10 MiB at step 600;
 *   - Operation1 -> ManipulateTemporaryBuffer commits 10 MiB ten times, at
 *     steps 60 + 120k, and releases it 10 ms later (the spikes);
 *   - InnerLoopOperation allocates one 40-byte block with new per step, never
 *     freed: 1200 blocks, 48000 bytes (the leak);
 *   - Initialize allocates 50 blocks of 1 KiB with new[]; main frees them at
 *     step 20.
 * Protocol on stdout (JSON lines, as memorytestapp.cc): {"pid":N,"ready":true},
 * then it waits for a line on stdin (start the trace, then press Enter); the
 * marks mid_before (step 580), mid_after (620), spikes_before (760) wait for a
 * line each; {"done":true,...ground truth...} at the end waits once more.
 * --no-pause: only the ready wait; it exits after the ground truth.
 */
#include <windows.h>

#include <stdio.h>
#include <string.h>

static const long STEPS = 1200;
static const DWORD STEP_MS = 2;
static const SIZE_T MIB = 1u << 20;
static const SIZE_T COMMIT = 10 * MIB;
static const long SPIKE_FIRST = 60, SPIKE_EVERY = 120, SPIKES = 10;
static const long MID_STEP = 600, MID_BEFORE = 580, MID_AFTER = 620, SPIKES_BEFORE = 760;

struct Item {
    char data[40];
};

static void *volatile sink;
static int pause_at_marks = 1;
static long long spike_start_ns[10], spike_end_ns[10];
static LARGE_INTEGER t0, freq;

extern "C" {
__attribute__((noinline)) void Initialize(char **blocks, int n);
__attribute__((noinline)) void InnerLoopOperation(void);
__attribute__((noinline)) void ManipulateTemporaryBuffer(int k);
__attribute__((noinline)) void Operation1(int k);
}

static long long now_ns(void)
{
    LARGE_INTEGER t;
    QueryPerformanceCounter(&t);
    long long d = t.QuadPart - t0.QuadPart;
    return d / freq.QuadPart * 1000000000LL + d % freq.QuadPart * 1000000000LL / freq.QuadPart;
}

static void say(const char *line)
{
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

/* A line on stdin (end of input: go on). */
static void wait_go(void)
{
    int c;
    while ((c = getchar()) != EOF && c != '\n')
        ;
}

static void *commit_or_die(void)
{
    void *p = VirtualAlloc(NULL, COMMIT, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    if (!p) {
        fprintf(stderr, "VirtualAlloc: error %lu\n", (unsigned long)GetLastError());
        exit(2);
    }
    return p;
}

extern "C" __attribute__((noinline)) void Initialize(char **blocks, int n)
{
    for (int i = 0; i < n; i++) {
        blocks[i] = new char[1024];
        blocks[i][0] = (char)i;
    }
}

extern "C" __attribute__((noinline)) void InnerLoopOperation(void)
{
    Item *it = new Item;
    it->data[0] = 1;
    sink = it;
}

extern "C" __attribute__((noinline)) void ManipulateTemporaryBuffer(int k)
{
    spike_start_ns[k] = now_ns();
    char *buf = (char *)commit_or_die();
    for (SIZE_T off = 0; off < COMMIT; off += 256 * 1024)
        buf[off] = (char)k;
    sink = buf;
    Sleep(10);
    VirtualFree(buf, 0, MEM_RELEASE);
    spike_end_ns[k] = now_ns();
}

extern "C" __attribute__((noinline)) void Operation1(int k)
{
    ManipulateTemporaryBuffer(k);
    __asm__ volatile("" ::: "memory"); /* keep the call from becoming a tail call */
}

static void pause_at(const char *name, long step)
{
    char line[128];
    snprintf(line, sizeof(line), "{\"at\":\"%s\",\"step\":%ld,\"t_ns\":%lld}", name, step, now_ns());
    say(line);
    if (pause_at_marks)
        wait_go();
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--no-pause"))
        pause_at_marks = 0;
    QueryPerformanceFrequency(&freq);
    QueryPerformanceCounter(&t0);
    /* Sleep(2) may last a timer tick (15.6 ms by default): the run then takes
     * ~20 s instead of ~3 s, closer to the article's 30 s; the steps are the same. */
    char line[128];
    snprintf(line, sizeof(line), "{\"pid\":%lu,\"ready\":true}", (unsigned long)GetCurrentProcessId());
    say(line);
    wait_go();

    char *init_blocks[50];
    Initialize(init_blocks, 50);
    void *steady[2] = {NULL, NULL};
    long long steady_ns[2] = {0, 0};
    int spikes = 0;
    for (long step = 0; step < STEPS; step++) {
        if (step == 2 || step == MID_STEP) {
            int s = step == 2 ? 0 : 1;
            /* main calls VirtualAlloc itself, as in the article. */
            steady_ns[s] = now_ns();
            steady[s] = commit_or_die();
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
        Sleep(STEP_MS);
    }

    printf("{\"done\":true,\"pid\":%lu,\"t_ns\":%lld,"
           "\"heap\":[{\"site\":\"InnerLoopOperation\",\"count\":%ld,\"bytes\":%ld,\"live_count\":%ld,"
           "\"live_bytes\":%ld},"
           "{\"site\":\"Initialize\",\"count\":50,\"bytes\":51200,\"live_count\":0,\"live_bytes\":0}],"
           "\"commits\":[{\"site\":\"main\",\"count\":2,\"bytes\":%llu,\"live_count\":2,\"live_bytes\":"
           "%llu,\"t_ns\":[%lld,%lld]},"
           "{\"site\":\"ManipulateTemporaryBuffer\",\"count\":%d,\"bytes\":%llu,\"live_count\":0,"
           "\"live_bytes\":0,\"spikes_ns\":[",
           (unsigned long)GetCurrentProcessId(), now_ns(), STEPS, STEPS * (long)sizeof(Item), STEPS,
           STEPS * (long)sizeof(Item), (unsigned long long)(2 * COMMIT),
           (unsigned long long)(2 * COMMIT), steady_ns[0], steady_ns[1], spikes,
           (unsigned long long)spikes * COMMIT);
    for (int k = 0; k < spikes; k++)
        printf("%s[%lld,%lld]", k ? "," : "", spike_start_ns[k], spike_end_ns[k]);
    printf("]}],\"mid_window\":{\"impacting\":%llu,\"site\":\"main\"},"
           "\"last_four_spikes\":{\"count\":4,\"size\":%llu,\"impacting\":0,\"site\":"
           "\"ManipulateTemporaryBuffer\"}}\n",
           (unsigned long long)COMMIT, (unsigned long long)(4 * COMMIT));
    fflush(stdout);
    if (pause_at_marks)
        wait_go();
    return 0;
}

// A C++ target for the live eBPF test: after a line on stdin, 4 new
// char[333] and 2 nothrow new char[444], a new[] that throws bad_alloc
// (caught), one new char[555] after it, all deleted; then waits for a line
// and exits 7.
#include <cstdio>
#include <new>
#include <unistd.h>

static char *volatile sink;

__attribute__((noinline)) static void use_new()
{
    char *keep[4];
    for (int i = 0; i < 4; i++)
        keep[i] = new char[333];
    for (int i = 0; i < 4; i++)
        delete[] keep[i];
    for (int i = 0; i < 2; i++) {
        sink = new (std::nothrow) char[444];
        delete[] sink;
    }
}

__attribute__((noinline)) static void after_throw()
{
    try {
        sink = new char[(size_t)1 << 62]; // fails: bad_alloc through new[] and new
    } catch (const std::bad_alloc &) {
    }
    sink = new char[555]; // the frames the exception left must not hide this one
    delete[] sink;
}

int main()
{
    char line[16];
    setvbuf(stdout, nullptr, _IONBF, 0);
    printf("ready %d\n", (int)getpid());
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    use_new();
    after_throw();
    printf("done\n");
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    return 7;
}

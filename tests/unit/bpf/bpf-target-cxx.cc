// A C++ target for the live eBPF test: after a line on stdin, 4 new char[333]
// and 2 nothrow new char[444], all deleted; then waits for a line and exits 7.
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

int main()
{
    char line[16];
    setvbuf(stdout, nullptr, _IONBF, 0);
    printf("ready %d\n", (int)getpid());
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    use_new();
    printf("done\n");
    if (!fgets(line, sizeof(line), stdin))
        return 1;
    return 7;
}

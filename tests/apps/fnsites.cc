/*
 * fnsites: one C++ function that allocates with new at four call sites, so
 * each block's innermost frame past operator new is one of four return
 * addresses into the same function (Parser::build). Grouped by function,
 * as WPA does, it is one row; by return address it was four of one name.
 * usage: fnsites N
 *
 * Protocol (app-sync.h): {"pid":N,"ready":true}, wait; Parser::build(N):
 * N rounds of the four news, none freed; print
 * {"done":true,"function":"Parser::build","count":C,"bytes":B}; wait; exit 0.
 */
#include "app-sync.h"

struct Token {
    char text[24];
};
struct Attr {
    char name[40];
};
struct Node {
    char body[72];
};

static void *volatile keep;

class Parser
{
  public:
    __attribute__((noinline)) void build(long n);
    long count = 0, bytes = 0;

  private:
    void hold(void *p, long size)
    {
        keep = p;
        count++;
        bytes += size;
    }
};

__attribute__((noinline)) void Parser::build(long n)
{
    for (long i = 0; i < n; i++) {
        hold(new Token, sizeof(Token));
        hold(new Attr, sizeof(Attr));
        hold(new Node, sizeof(Node));
        hold(new char[16], 16);
    }
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 0;
    if (n <= 0) {
        fprintf(stderr, "usage: fnsites N\n");
        return 2;
    }
    app_sync_init();
    app_sync_ready();
    Parser p;
    p.build(n);
    app_sync_say("{\"done\":true,\"function\":\"Parser::build\",\"count\":%ld,\"bytes\":%ld}",
                 p.count, p.bytes);
    app_sync_wait();
    return 0;
}

// A C++ program whose functions resolve to demangled names (built -O2 -g).
#include "helper-loop.h"

volatile long helper_sink;

namespace htsym
{
template <typename T> struct Box {
    __attribute__((noinline)) static T twice(T v)
    {
        helper_sink += v;
        return v * 2 + helper_sink;
    }
};
template struct Box<int>;

__attribute__((noinline)) long outer(long v, const char *tag)
{
    helper_sink += v + tag[0];
    return helper_sink;
}
} // namespace htsym

int main()
{
    helper_put("twice", (const void *)&htsym::Box<int>::twice);
    helper_put("outer", (const void *)&htsym::outer);
    helper_sink = htsym::Box<int>::twice(3) + htsym::outer(4, "x");
    return helper_loop();
}

/* A subject for test-bpf-fpcheck: functions that call others and keep
 * values across the calls, built with and without frame pointers. */
#include <stdio.h>
#include <stdlib.h>

#define F(n, next)                                                                                 \
    __attribute__((noinline)) long f##n(long x)                                                    \
    {                                                                                              \
        long a = x * (n + 3), b = next(x + n);                                                     \
        printf("%ld\n", a ^ b);                                                                    \
        return a + b * 7;                                                                          \
    }

__attribute__((noinline)) long f0(long x)
{
    return x > 0 ? atol("1") + x : 0;
}
F(1, f0)
F(2, f1)
F(3, f2)
F(4, f3)
F(5, f4)
F(6, f5)
F(7, f6)
F(8, f7)
F(9, f8)
F(10, f9)
F(11, f10)
F(12, f11)
F(13, f12)
F(14, f13)
F(15, f14)
F(16, f15)
F(17, f16)
F(18, f17)
F(19, f18)
F(20, f19)

int main(int argc, char **argv)
{
    (void)argv;
    return (int)f20(argc) & 1;
}

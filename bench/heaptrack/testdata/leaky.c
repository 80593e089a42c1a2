/* The program recorded in leaky.raw / leaky.interpreted (README in this directory). */
#include <stdlib.h>

__attribute__((noinline)) static void *make_leak(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" ::"r"(p) : "memory");
    return p;
}

__attribute__((noinline)) static void churn(int n)
{
    for (int i = 0; i < n; i++) {
        void *p = malloc(32 + (size_t)(i % 5));
        __asm__ volatile("" ::"r"(p) : "memory");
        free(p);
    }
}

int main(void)
{
    static void *keep[7];
    churn(50);
    for (int i = 0; i < 7; i++)
        keep[i] = make_leak(100);
    void *r = malloc(10);
    r = realloc(r, 5000);
    free(r);
    return keep[0] == NULL;
}

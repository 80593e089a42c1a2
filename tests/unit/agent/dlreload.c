/* dlreload LIB...: each library in turn dlopen'ed, its dlframe_alloc and
 * dlframe_signal called (mallocs under its frames, one in a signal
 * handler) and dlclose'd; prints the address of
 * dlframe_alloc in each, so a test sees the libraries took one address. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlreload: %s\n", dlerror());
            return 1;
        }
        void *(*f)(size_t) = (void *(*)(size_t))dlsym(h, "dlframe_alloc");
        if (!f)
            return 1;
        void *(*g)(void) = (void *(*)(void))dlsym(h, "dlframe_signal");
        if (!g)
            return 1;
        printf("%p\n", (void *)f);
        for (int k = 0; k < 4; k++) {
            free(f(16));
            free(g());
        }
        dlclose(h);
    }
    return 0;
}

/* mtalloc's C++ sites: operator new / new[] / delete / delete[] (mtalloc.h).
 * Element types are trivially destructible, so new[] asks for exactly n bytes
 * (no array cookie) and the requested size is known. */
#include "mtalloc.h"

struct Obj48 {
    char data[48];
};

extern "C" __attribute__((noinline)) void leak_new(struct mt_truth *t, int i)
{
    Obj48 *o = new Obj48;
    o->data[0] = (char)i;
    mt_sink = o;
    t->site[MT_LEAK_NEW].count++;
    t->site[MT_LEAK_NEW].bytes += sizeof(Obj48);
}

extern "C" __attribute__((noinline)) void leak_new_array(struct mt_truth *t, int i)
{
    size_t n = 33 + (size_t)i;
    char *a = new char[n];
    a[0] = (char)i;
    mt_sink = a;
    t->site[MT_LEAK_NEW_ARRAY].count++;
    t->site[MT_LEAK_NEW_ARRAY].bytes += n;
}

extern "C" __attribute__((noinline)) void churn_new(struct mt_truth *t, int i)
{
    Obj48 *o = new Obj48;
    o->data[0] = (char)i;
    mt_sink = o;
    delete o;
    t->site[MT_CHURN_NEW].count++;
    t->site[MT_CHURN_NEW].bytes += sizeof(Obj48);
}

extern "C" __attribute__((noinline)) void churn_new_array(struct mt_truth *t, int i)
{
    size_t n = 200 + (size_t)i;
    char *a = new char[n];
    a[0] = (char)i;
    mt_sink = a;
    delete[] a;
    t->site[MT_CHURN_NEW_ARRAY].count++;
    t->site[MT_CHURN_NEW_ARRAY].bytes += n;
}

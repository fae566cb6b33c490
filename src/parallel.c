#include "parallel.h"

#include "env.h"
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct loop {
    cake_unit_fn fn;
    void *context;
    int64_t units;
    atomic_int_fast64_t next;
} loop;

static void *worker(void *arg) {
    loop *l = arg;
    for (;;) {
        const int64_t u = atomic_fetch_add(&l->next, 1);
        if (u >= l->units) return NULL;
        l->fn(l->context, u);
    }
}

void cake_parallel_for(int threads, int64_t units, cake_unit_fn fn, void *context) {
    loop l = {fn, context, units, 0};
    if (threads > units) threads = (int)units;
    pthread_t *ids = threads > 1 ? malloc(sizeof *ids * (size_t)(threads - 1)) : NULL;
    int started = 0;
    if (ids)
        while (started < threads - 1 && pthread_create(&ids[started], NULL, worker, &l) == 0)
            started++;
    worker(&l);
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    free(ids);
}

static int online_processors(void) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

cake_status cake_cpu_threads(int requested, int *threads) {
    *threads = requested;
    if (requested > 0) return CAKE_SUCCESS;
    CAKE_CHECK(cake_env_threads(threads)); /* read per call: no hidden global state */
    if (*threads == 0) *threads = online_processors();
    return CAKE_SUCCESS;
}

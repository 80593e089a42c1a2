/* The query workers (qworker.c): QWORKER_THREADS threads run the jobs whose
 * view is open (engine_view_query on it, rows made when the job asks), and
 * hand each job back on the loop. Plain uv threads, mutex, cond and async:
 * the same on Windows. Nothing a worker uses is freed under it: the queue
 * (session.c) keeps a dropped session until its running query returns. */
#ifdef HT_IN_ENGINE
#error "the engine includes no source or server header (daemon/CMakeLists.txt)"
#endif
#ifndef QWORKER_H
#define QWORKER_H

#include <uv.h>

struct qjob;
struct qworker;

/* The workers on loop; each finished job is passed to finished on the loop.
 * NULL when no thread can start (the jobs then run with qworker_run_here). */
struct qworker *qworker_new(uv_loop_t *loop, void (*finished)(struct qjob *j));
/* Queue j (its view open) for a worker. */
void qworker_run(struct qworker *qw, struct qjob *j);
/* Run j on this thread, as a worker would (finished is not called). */
void qworker_run_here(struct qjob *j);
/* Shut the workers down (joined; the running jobs finish first, and those
 * no worker took are finished with UV_ECANCELED); qw is freed. */
void qworker_stop(struct qworker *qw);

#endif

/************************************************************\
 * flux-quantum: per-job state and the held set.
 *
 * Every active qpu job (a request of its own, or a follower of one)
 * has a struct held_job hung off it with flux_jobtap_job_aux_set(), so
 * it goes away with the job.  The jobs held in DEPEND right now are
 * also on the context's list, newest first; this file is the one that
 * links and unlinks them, and moves the list's generation when it does
 * (`list` answers "unchanged" to a caller that saw the current one).
 * It also owns the job's subscription to its own events, which its
 * history, its other dependencies and its priority all read.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <errno.h>
#include <stdlib.h>

#include "quantum.h"

#define AUX_JOB "flux-quantum::job"

void held_unlink (struct held_job *job)
{
    struct quantum_ctx *ctx = job->ctx;

    if (!job->on_list)
        return;
    if (job->prev)
        job->prev->next = job->next;
    else
        ctx->head = job->next;
    if (job->next)
        job->next->prev = job->prev;
    job->prev = job->next = NULL;
    job->on_list = false;
    ctx->held--;
    ctx->generation++;
    /* Nobody adopts a job that is no longer held: its history goes. */
    json_decref (job->history);
    job->history = NULL;
    job->history_known = false;
}

void held_link (struct held_job *job)
{
    struct quantum_ctx *ctx = job->ctx;

    if (job->on_list)
        return;
    job->prev = NULL;
    job->next = ctx->head;
    if (ctx->head)
        ctx->head->prev = job;
    ctx->head = job;
    job->on_list = true;
    ctx->held++;
    ctx->generation++;
}

static void held_job_destroy (void *arg)
{
    struct held_job *job = arg;

    if (job) {
        int saved_errno = errno;
        held_unlink (job);
        json_decref (job->request);
        json_decref (job->history);
        json_decref (job->deps);
        json_decref (job->deps_gone);
        free (job);
        errno = saved_errno;
    }
}

/* Hang the state of a new qpu job off it (request NULL: a follower).
 */
struct held_job *held_job_track (struct quantum_ctx *ctx,
                                 flux_jobid_t id,
                                 uint32_t userid,
                                 double t_submit,
                                 json_t *request)
{
    struct held_job *job;

    if (!(job = calloc (1, sizeof (*job))))
        return NULL;
    job->ctx = ctx;
    job->id = id;
    job->userid = userid;
    job->t_submit = t_submit;
    job->request = request ? json_incref (request) : NULL;
    if (flux_jobtap_job_aux_set (ctx->p, id, AUX_JOB, job, held_job_destroy)
        < 0) {
        held_job_destroy (job);
        return NULL;
    }
    return job;
}

struct held_job *held_job_lookup (struct quantum_ctx *ctx, flux_jobid_t id)
{
    return flux_jobtap_job_aux_get (ctx->p, id, AUX_JOB);
}

int held_job_subscribe (struct held_job *job)
{
    if (job->subscribed)
        return 0;
    if (flux_jobtap_job_subscribe (job->ctx->p, job->id) < 0)
        return -1;
    job->subscribed = true;
    return 0;
}

void held_job_unsubscribe (struct held_job *job)
{
    if (!job->subscribed)
        return;
    flux_jobtap_job_unsubscribe (job->ctx->p, job->id);
    job->subscribed = false;
}

int held_count_for_user (struct quantum_ctx *ctx, uint32_t userid)
{
    struct held_job *job;
    int count = 0;

    for (job = ctx->head; job != NULL; job = job->next) {
        if (job->userid == userid)
            count++;
    }
    return count;
}

/* vi: ts=4 sw=4 expandtab
 */

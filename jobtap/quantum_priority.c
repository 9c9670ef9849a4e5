/************************************************************\
 * flux-quantum: a released job's priority.
 *
 * A released job's quantum result is ready or about to be, so it runs
 * at the plugin's release-priority (default the highest) rather than
 * wait behind ordinary work for nodes.  A user hold (urgency 0) is
 * respected, and release-priority -1 leaves priority to the other
 * plugins.
 *
 * Composing with another priority plugin (flux-accounting's
 * mf_priority): the job-manager calls every loaded plugin's
 * job.state.priority and job.priority.get on the same arguments, in
 * load order, and the last one that sets a priority decides.  Loaded
 * after such a plugin, this one overrides it for released qpu jobs
 * only and every other job keeps the other plugin's priority.  Loaded
 * before it, the other plugin's value wins: a released job then sees
 * its priority change (job.state.sched, or a "priority" event when
 * `flux account-priority-update` reprioritizes all jobs), and it is
 * set back here on the next turn of the reactor (never from inside
 * the job-manager's own reprioritization, which would overwrite it),
 * once per change, said once in the log with the order that avoids it.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include "quantum.h"

static void restore_cb (flux_reactor_t *r,
                        flux_watcher_t *w,
                        int revents,
                        void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *ids = ctx->restore;
    size_t index;
    json_t *value;

    ctx->restore = NULL;
    json_array_foreach (ids, index, value) {
        flux_jobid_t id = (flux_jobid_t)json_integer_value (value);
        struct held_job *job = held_job_lookup (ctx, id);

        if (!job || !job->released || ctx->conf.release_priority < 0)
            continue;
        if (flux_jobtap_reprioritize_job (ctx->p,
                                          id,
                                          (unsigned int)ctx->conf.release_priority)
            == 0)
            ctx->restored++;
    }
    json_decref (ids);
}

static void restore_priority (struct quantum_ctx *ctx,
                              struct held_job *job,
                              int64_t priority,
                              int urgency)
{
    if (ctx->conf.release_priority < 0
        || !job->released
        || urgency == FLUX_JOB_URGENCY_HOLD
        || priority == ctx->conf.release_priority)
        return;
    if (!ctx->restore_said) {
        flux_log (flux_jobtap_get_flux (ctx->p),
                  LOG_WARNING,
                  "quantum: a jobtap plugin loaded after quantum.so (such as "
                  "flux-accounting's mf_priority.so) set released qpu job %ju's "
                  "priority to %jd; it is set back to %jd: load quantum.so "
                  "after that plugin to spare the extra priority events",
                  (uintmax_t)job->id,
                  (intmax_t)priority,
                  (intmax_t)ctx->conf.release_priority);
        ctx->restore_said = true;
    }
    if ((!ctx->restore && !(ctx->restore = json_array ()))
        || json_array_append_new (ctx->restore, json_integer (job->id)) < 0)
        return;
    flux_timer_watcher_reset (ctx->restore_w, 0., 0.);
    flux_watcher_start (ctx->restore_w);
}

static int priority_cb (flux_plugin_t *p,
                        const char *topic,
                        flux_plugin_arg_t *args,
                        void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    int urgency;
    struct held_job *job;

    if (ctx->conf.release_priority < 0)
        return 0;
    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:I s:i}",
                                "id", &id,
                                "urgency", &urgency) < 0)
        return 0;
    /* urgency 0 is a user hold: leave it to the default priority (0). */
    if (!(job = held_job_lookup (ctx, id)) || !job->released
        || urgency == FLUX_JOB_URGENCY_HOLD)
        return 0;
    return flux_plugin_arg_pack (args,
                                 FLUX_PLUGIN_ARG_OUT,
                                 "{s:I}",
                                 "priority", ctx->conf.release_priority);
}

/* Leaving DEPEND for PRIORITY: unlink (released) and assign priority.
 * A released job stays subscribed to its events until it runs, to see
 * a later plugin's "priority" event (restore_priority).
 */
static int priority_state_cb (flux_plugin_t *p,
                              const char *topic,
                              flux_plugin_arg_t *args,
                              void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    struct held_job *job;

    if (quantum_leave_depend_cb (p, topic, args, arg) < 0)
        return -1;
    if (ctx->conf.release_priority >= 0
        && flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:I}", "id", &id) == 0
        && (job = held_job_lookup (ctx, id))
        && job->released)
        (void)held_job_subscribe (job);
    return priority_cb (p, topic, args, arg);
}

/* SCHED: the priority every plugin agreed on.  A released job's that is
 * not the site's release priority was set by a plugin loaded later.
 */
static int sched_cb (flux_plugin_t *p,
                     const char *topic,
                     flux_plugin_arg_t *args,
                     void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    json_int_t priority;
    int urgency;
    struct held_job *job;

    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:I s:I s:i}",
                                "id", &id,
                                "priority", &priority,
                                "urgency", &urgency) < 0
        || !(job = held_job_lookup (ctx, id)))
        return 0;
    restore_priority (ctx, job, priority, urgency);
    return 0;
}

/* job.event.priority of a released job: a reprioritization (another
 * plugin's job.priority.get) may have taken its place away.
 */
static int priority_event_cb (flux_plugin_t *p,
                              const char *topic,
                              flux_plugin_arg_t *args,
                              void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    json_int_t priority;
    int urgency;
    struct held_job *job;

    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:I s:i s:{s:{s:I}}}",
                                "id", &id,
                                "urgency", &urgency,
                                "entry",
                                  "context",
                                    "priority", &priority) < 0
        || !(job = held_job_lookup (ctx, id)))
        return 0;
    restore_priority (ctx, job, priority, urgency);
    return 0;
}

/* RUN or INACTIVE: a released job's priority no longer matters. */
static int run_cb (flux_plugin_t *p,
                   const char *topic,
                   flux_plugin_arg_t *args,
                   void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    struct held_job *job;

    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:I}", "id", &id) == 0
        && (job = held_job_lookup (ctx, id))
        && job->released)
        held_job_unsubscribe (job);
    return 0;
}

int quantum_priority_init (struct quantum_ctx *ctx)
{
    flux_reactor_t *r = flux_get_reactor (flux_jobtap_get_flux (ctx->p));

    if (!(ctx->restore_w = flux_timer_watcher_create (r, 0., 0., restore_cb, ctx)))
        return -1;
    return 0;
}

void quantum_priority_fini (struct quantum_ctx *ctx)
{
    flux_watcher_destroy (ctx->restore_w);
    json_decref (ctx->restore);
}

const struct flux_plugin_handler quantum_priority_tab[] = {
    { "job.state.priority", priority_state_cb, NULL },
    { "job.priority.get", priority_cb, NULL },
    { "job.state.sched", sched_cb, NULL },
    { "job.state.run", run_cb, NULL },
    { "job.event.priority", priority_event_cb, NULL },
    { 0 },
};

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: a held job's other dependencies.
 *
 * A qpu job may wait for more than its quantum task: the after*
 * family (a step that writes its program), begin-time, another
 * plugin's hold (flux-accounting's limits).  This file keeps, for
 * every held job, the set of its other unresolved dependencies, and
 * `list` shows it with the job, so the handlers can create the task
 * only once the job's inputs are there.  Which of them hold the task
 * is the handlers' policy, not this plugin's: it reports them all.
 *
 * A new submission is followed from job.create, before any dependency
 * is added (the job-manager checks dependencies between job.create
 * and job.new), through its dependency-add and dependency-remove
 * events.  A job met again after a job-manager restart or a plugin
 * load has no such past here: its set is read once from the
 * job-manager (job-manager.list, one request for all of them), and
 * `list` shows it as not known yet (null) until the answer comes.
 * Its events are followed meanwhile; a dependency is never added
 * again once removed (flux-core's grudgeset), so what was removed
 * meanwhile stays removed whatever the answer says.  A job that never
 * leaves DEPEND because one of them can never be satisfied ends with
 * an exception, and leaves the held set like a cancelled one.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <errno.h>
#include <string.h>

#include "qpu_protocol.h"
#include "quantum.h"

int quantum_deps_follow (struct held_job *job)
{
    if (held_job_subscribe (job) < 0)
        return -1;
    job->deps_known = true;
    return 0;
}

static int deps_add (struct held_job *job, const char *description)
{
    if (json_object_get (job->deps_gone, description)
        || json_object_get (job->deps, description))
        return 0;
    if ((!job->deps && !(job->deps = json_object ()))
        || json_object_set_new (job->deps, description, json_true ()) < 0) {
        errno = ENOMEM;
        return -1;
    }
    if (job->on_list)
        job->ctx->generation++;
    return 0;
}

static int deps_remove (struct held_job *job, const char *description)
{
    if (!job->deps_known
        && ((!job->deps_gone && !(job->deps_gone = json_object ()))
            || json_object_set_new (job->deps_gone, description, json_true ())
                   < 0)) {
        errno = ENOMEM;
        return -1;
    }
    if (json_object_del (job->deps, description) == 0 && job->on_list)
        job->ctx->generation++;
    return 0;
}

/* job.event.dependency-add and job.event.dependency-remove of a
 * followed job (the "qpu" dependency itself is the hold's).
 */
static int dependency_event_cb (flux_plugin_t *p,
                                const char *topic,
                                flux_plugin_arg_t *args,
                                void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    const char *description;
    struct held_job *job;
    int rc;

    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:I s:{s:{s:s}}}",
                                "id", &id,
                                "entry",
                                  "context",
                                    "description", &description) < 0
        || !(job = held_job_lookup (ctx, id))
        || job->released
        || strcmp (description, QPU_DEPENDENCY_SCHEME) == 0)
        return 0;
    if (strcmp (topic, "job.event.dependency-add") == 0)
        rc = deps_add (job, description);
    else
        rc = deps_remove (job, description);
    if (rc < 0)
        flux_log_error (flux_jobtap_get_flux (p),
                        "quantum: job %ju: cannot follow dependency %s",
                        (uintmax_t)id,
                        description);
    return 0;
}

/* Every held job whose set is not known yet takes it from one entry of
 * job-manager.list: {id, dependencies?, ...}.
 */
static void deps_learn (struct quantum_ctx *ctx, json_t *entry)
{
    json_int_t id;
    json_t *deps = NULL;
    struct held_job *job;
    size_t index;
    json_t *value;

    if (json_unpack (entry, "{s:I s?o}", "id", &id, "dependencies", &deps) < 0
        || !(job = held_job_lookup (ctx, (flux_jobid_t)id))
        || job->deps_known)
        return;
    json_array_foreach (deps, index, value) {
        const char *description = json_string_value (value);
        if (description
            && strcmp (description, QPU_DEPENDENCY_SCHEME) != 0
            && deps_add (job, description) < 0)
            flux_log_error (flux_jobtap_get_flux (ctx->p),
                            "quantum: job %ju: cannot follow dependency %s",
                            (uintmax_t)job->id,
                            description);
    }
}

static void deps_list_continuation (flux_future_t *f, void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *jobs;
    json_t *entry;
    size_t index;
    struct held_job *job;

    if (flux_rpc_get_unpack (f, "{s:o}", "jobs", &jobs) < 0 || !json_is_array (jobs))
        /* Said once; the jobs count as waiting for nothing else, so a
         * missing answer can never keep a task from being created.
         */
        flux_log_error (flux_jobtap_get_flux (ctx->p),
                        "quantum: cannot read the dependencies of held jobs "
                        "met at load; their tasks are created without "
                        "waiting for them");
    else {
        json_array_foreach (jobs, index, entry)
            deps_learn (ctx, entry);
    }
    for (job = ctx->head; job != NULL; job = job->next) {
        if (!job->deps_known) {
            job->deps_known = true;
            json_decref (job->deps_gone);
            job->deps_gone = NULL;
        }
    }
    ctx->generation++;
    flux_future_destroy (f);
    ctx->deps_f = NULL;
}

int quantum_deps_rebuild (struct held_job *job)
{
    struct quantum_ctx *ctx = job->ctx;
    flux_t *h = flux_jobtap_get_flux (ctx->p);

    if (held_job_subscribe (job) < 0)
        return -1;
    job->deps_known = false;
    if (ctx->deps_f)
        return 0; /* one request answers every job met at this load */
    if (!(ctx->deps_f = flux_rpc_pack (h,
                                       "job-manager.list",
                                       FLUX_NODEID_ANY,
                                       0,
                                       "{s:i}",
                                       "max_entries", 0))
        || flux_future_then (ctx->deps_f, -1., deps_list_continuation, ctx) < 0) {
        flux_future_destroy (ctx->deps_f);
        ctx->deps_f = NULL;
        job->deps_known = true;
        return -1;
    }
    return 0;
}

int quantum_deps_entry (struct held_job *job, json_t **entry)
{
    json_t *names;
    const char *description;
    json_t *value;

    *entry = NULL;
    if (!job->deps_known) {
        *entry = json_null ();
        return 0;
    }
    if (!job->deps || json_object_size (job->deps) == 0)
        return 0;
    if (!(names = json_array ()))
        goto nomem;
    json_object_foreach (job->deps, description, value) {
        if (json_array_append_new (names, json_string (description)) < 0) {
            json_decref (names);
            goto nomem;
        }
    }
    *entry = names;
    return 0;
nomem:
    errno = ENOMEM;
    return -1;
}

void quantum_deps_fini (struct quantum_ctx *ctx)
{
    flux_future_destroy (ctx->deps_f);
    ctx->deps_f = NULL;
}

const struct flux_plugin_handler quantum_deps_tab[] = {
    { "job.event.dependency-*", dependency_event_cb, NULL },
    { 0 },
};

/* vi: ts=4 sw=4 expandtab
 */

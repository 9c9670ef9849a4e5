/************************************************************\
 * flux-quantum: the "quantum" jobtap plugin.
 *
 * Holds every job that carries attributes.system.qpu in the DEPEND
 * state with the dependency "qpu" until the flux-quantum handlers
 * (user space, running with the job owner's credentials) release it
 * through this plugin's service, or fail it.
 *
 * This plugin runs inside the job-manager: it never blocks, never
 * talks to a vendor, never holds a secret.  It parses only what it
 * needs to operate; the full qpu request grammar is checked at
 * submit by the flux-quantum ingest validator (one parser, in Python).
 *
 * Services (job-manager.quantum.METHOD, callable by guests; a job's
 * own user or the instance owner may act on a job, anyone else gets
 * EPERM and nothing changes):
 *   list     {generation?}                       -> {jobs:[...], generation}
 *   release  {id|ids, task?, device?, info?, resources?}
 *                                                -> {released:[...]}
 *   fail     {id|ids, note}                      -> {failed:[...]}
 *   event    {id, name:"qpu-*", context?}        -> {}
 *   events   {events:[{id, name, context?}...]}  -> {errors:[null|{errno,error}...]}
 *   records  {ids}                               -> {jobs:[...]}
 *
 * A job may also ride another qpu job's task (fan-out across jobs):
 *   flux submit --dependency=qpu:JOBID ...
 * holds it the same way, and `list` reports the job it follows.
 *
 * `list` answers with the generation of the held set, a counter that
 * moves whenever a job is held or leaves it; a caller that passes the
 * generation it last saw gets {unchanged:true, generation} instead of
 * the jobs when nothing moved (a service polling 10,000 held jobs then
 * pays for one small message, not for 10,000 entries).
 *
 * `records` answers, for each held job it names whose qpu history this
 * plugin saw from the job's submission, the job's current jobspec and
 * its qpu-* eventlog entries (the very entries the job-manager keeps,
 * shared, not copied).  A service adopting 10,000 held jobs after a
 * restart reads them in a few messages instead of 10,000 lookups.  A
 * job held before this plugin was loaded (a broker restart, a reload)
 * is left out: the caller reads its eventlog.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flux/core.h>
#include <flux/jobtap.h>
#include <jansson.h>

#include "qpu_config.h"
#include "qpu_payload.h"
#include "qpu_protocol.h"
#include "qpu_request.h"

#define PLUGIN_NAME        "quantum"
#define AUX_JOB            "flux-quantum::job"
#define EXCEPTION_TYPE     "qpu"
#define EVENT_TOPIC_PREFIX "job.event." QPU_EVENT_PREFIX

struct held_job;

struct quantum_ctx {
    flux_plugin_t *p;
    struct quantum_config conf;
    struct held_job *head; /* jobs currently held, newest first */
    int held;
    uint64_t generation;   /* moves whenever head changes */
    uint64_t released;
    uint64_t failed;
    uint64_t cancelled;
    /* Released jobs whose priority a plugin loaded after this one
     * changed (see restore_priority), set back on the next loop turn.
     */
    json_t *restore;
    flux_watcher_t *restore_w;
    uint64_t restored;
    bool restore_said;
};

/* Per-job state, hung off every active qpu job with
 * flux_jobtap_job_aux_set() so it goes away with the job.
 */
struct held_job {
    struct held_job *prev;
    struct held_job *next;
    struct quantum_ctx *ctx;
    flux_jobid_t id;
    uint32_t userid;
    double t_submit;
    json_t *request;       /* attributes.system.qpu, or NULL for a follower */
    flux_jobid_t follow;   /* --dependency=qpu:JOBID: ride that job's task */
    json_t *history;       /* its qpu-* eventlog entries while held, or NULL */
    bool history_known;    /* seen since submission: history is complete */
    bool on_list;
    bool released;
};

static void held_unlink (struct held_job *job)
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

static void held_link (struct held_job *job)
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
        free (job);
        errno = saved_errno;
    }
}

static struct held_job *held_job_create (struct quantum_ctx *ctx,
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
    return job;
}

static struct held_job *held_job_lookup (struct quantum_ctx *ctx,
                                         flux_jobid_t id)
{
    return flux_jobtap_job_aux_get (ctx->p, id, AUX_JOB);
}

static int count_held_for_user (struct quantum_ctx *ctx, uint32_t userid)
{
    struct held_job *job;
    int count = 0;

    for (job = ctx->head; job != NULL; job = job->next) {
        if (job->userid == userid)
            count++;
    }
    return count;
}

/*  Callbacks
 */

static int validate_cb (flux_plugin_t *p,
                        const char *topic,
                        flux_plugin_arg_t *args,
                        void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *jobspec;
    json_t *system;
    int userid;
    char errbuf[256];

    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:o s:i}",
                                "jobspec", &jobspec,
                                "userid", &userid) < 0)
        return flux_jobtap_reject_job (p, args, "quantum: cannot unpack job");
    system = qpu_jobspec_system (jobspec);
    if (qpu_check_request (system, errbuf, sizeof (errbuf)) < 0)
        return flux_jobtap_reject_job (p, args, "%s", errbuf);
    if (json_object_get (system, QPU_REQUEST_ATTR)
        && ctx->conf.max_held_per_user > 0
        && count_held_for_user (ctx, userid) >= ctx->conf.max_held_per_user)
        return flux_jobtap_reject_job (p,
                                       args,
                                       "this site allows at most %d jobs per "
                                       "user held for a QPU; wait for some to "
                                       "be released",
                                       ctx->conf.max_held_per_user);
    return 0;
}

/* job.new: called at submit, and for every active job after a
 * job-manager restart or a plugin load.  Rebuild our view here: a job
 * in DEPEND whose jobspec has no qpu_task is still held (the "qpu"
 * dependency itself persists in the eventlog).
 */
static int new_cb (flux_plugin_t *p,
                   const char *topic,
                   flux_plugin_arg_t *args,
                   void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *jobspec;
    json_t *system;
    json_t *request;
    flux_jobid_t id;
    int userid;
    int state;
    double t_submit;
    struct held_job *job;

    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:o s:I s:i s:i s:f}",
                                "jobspec", &jobspec,
                                "id", &id,
                                "userid", &userid,
                                "state", &state,
                                "t_submit", &t_submit) < 0)
        return flux_jobtap_error (p, args, "quantum: cannot unpack job.new");
    flux_jobid_t leader = 0;

    system = qpu_jobspec_system (jobspec);
    request = json_object_get (system, QPU_REQUEST_ATTR);
    if (qpu_follow_target (system, &leader) < 0)
        leader = 0; /* rejected in job.dependency.qpu */
    if (!request && !leader)
        return 0;
    if (!(job = held_job_create (ctx, id, (uint32_t)userid, t_submit, request)))
        return flux_jobtap_error (p, args, "quantum: out of memory");
    job->follow = leader;
    if (flux_jobtap_job_aux_set (p, id, AUX_JOB, job, held_job_destroy) < 0) {
        held_job_destroy (job);
        return flux_jobtap_error (p, args, "quantum: cannot track job");
    }
    if (json_object_get (system, QPU_TASK_ATTR))
        job->released = true;
    else if (state == FLUX_JOB_STATE_DEPEND)
        held_link (job);
    else if (state == FLUX_JOB_STATE_NEW) {
        /* A new submission: every qpu-* event it will get passes
         * job_event_cb, so its history here is complete.  (A job that
         * was active before this plugin loaded is not subscribed.)
         */
        if (flux_jobtap_job_subscribe (p, id) == 0)
            job->history_known = true;
    }
    return 0;
}

static void restore_priority (struct quantum_ctx *ctx,
                              struct held_job *job,
                              int64_t priority,
                              int urgency);

/* job.event.priority of a released job: a reprioritization (another
 * plugin's job.priority.get) may have taken its place away.
 */
static int priority_event_cb (struct quantum_ctx *ctx, flux_plugin_arg_t *args)
{
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

/* job.event.*: keep a held job's qpu-* eventlog entries (references to
 * the job-manager's own) for `records`.
 */
static int job_event_cb (flux_plugin_t *p,
                         const char *topic,
                         flux_plugin_arg_t *args,
                         void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    json_t *entry;
    struct held_job *job;

    if (strcmp (topic, "job.event.priority") == 0)
        return priority_event_cb (ctx, args);
    if (strncmp (topic, EVENT_TOPIC_PREFIX, strlen (EVENT_TOPIC_PREFIX)) != 0)
        return 0;
    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:I s:o}",
                                "id", &id,
                                "entry", &entry) < 0
        || !(job = held_job_lookup (ctx, id))
        || !job->history_known
        || job->released)
        return 0;
    if ((!job->history && !(job->history = json_array ()))
        || json_array_append (job->history, entry) < 0) {
        /* Incomplete from now on: `records` leaves the job to the
         * eventlog lookup.
         */
        json_decref (job->history);
        job->history = NULL;
        job->history_known = false;
        flux_jobtap_job_unsubscribe (p, id);
    }
    return 0;
}

/* Add the "qpu" dependency to a tracked job and list it as held.
 * EEXIST means the hold survived a restart or a plugin reload.
 */
static int hold_job (flux_plugin_t *p, struct held_job *job)
{
    if (flux_jobtap_dependency_add (p, job->id, QPU_DEPENDENCY_SCHEME) < 0
        && errno != EEXIST)
        return -1;
    held_link (job);
    return 0;
}

static int depend_cb (flux_plugin_t *p,
                      const char *topic,
                      flux_plugin_arg_t *args,
                      void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    struct held_job *job;

    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:I}", "id", &id)
        < 0)
        return flux_jobtap_error (p, args, "quantum: cannot unpack id");
    if (!(job = held_job_lookup (ctx, id)) || job->released)
        return 0;
    if (hold_job (p, job) < 0) {
        flux_jobtap_raise_exception (p,
                                     id,
                                     EXCEPTION_TYPE,
                                     0,
                                     "quantum: cannot add qpu dependency: %s",
                                     strerror (errno));
        return -1;
    }
    return 0;
}

/* job.dependency.qpu: --dependency=qpu:JOBID rides JOBID's quantum task.
 * The leader must be an active qpu job of the same user.
 */
static int dependency_cb (flux_plugin_t *p,
                          const char *topic,
                          flux_plugin_arg_t *args,
                          void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    flux_jobid_t leader_id;
    int userid;
    const char *value;
    json_t *jobspec;
    struct held_job *job;
    struct held_job *leader;

    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:I s:i s:o s:{s:s}}",
                                "id", &id,
                                "userid", &userid,
                                "jobspec", &jobspec,
                                "dependency",
                                  "value", &value) < 0)
        return flux_jobtap_reject_job (p, args, "quantum: cannot unpack dependency");
    if (json_object_get (qpu_jobspec_system (jobspec), QPU_REQUEST_ATTR))
        return flux_jobtap_reject_job (p,
                                       args,
                                       "give either --setattr=qpu=... or "
                                       "--dependency=qpu:JOBID, not both");
    if (flux_job_id_parse (value, &leader_id) < 0)
        return flux_jobtap_reject_job (p,
                                       args,
                                       "--dependency=qpu:JOBID needs a job id, "
                                       "got '%s'",
                                       value);
    if (!(leader = held_job_lookup (ctx, leader_id)) || leader->follow)
        return flux_jobtap_reject_job (p,
                                       args,
                                       "--dependency=qpu:%s: that job is not an "
                                       "active job with its own qpu request",
                                       value);
    if (leader->userid != (uint32_t)userid)
        return flux_jobtap_reject_job (p,
                                       args,
                                       "--dependency=qpu:%s: that job belongs "
                                       "to another user",
                                       value);
    if (!(job = held_job_lookup (ctx, id)) || job->released)
        return 0;
    if (hold_job (p, job) < 0)
        return flux_jobtap_reject_job (p,
                                       args,
                                       "quantum: cannot add qpu dependency: %s",
                                       strerror (errno));
    return 0;
}

/* A job leaves DEPEND through release (PRIORITY) or an exception
 * (CLEANUP, e.g. flux cancel).  Either way it is no longer held.
 */
static int leave_depend_cb (flux_plugin_t *p,
                            const char *topic,
                            flux_plugin_arg_t *args,
                            void *arg)
{
    struct quantum_ctx *ctx = arg;
    flux_jobid_t id;
    struct held_job *job;

    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:I}", "id", &id)
        < 0)
        return 0;
    if ((job = held_job_lookup (ctx, id)) && job->on_list) {
        held_unlink (job);
        if (strcmp (topic, "job.state.cleanup") == 0)
            ctx->cancelled++;
    }
    if (job)
        flux_jobtap_job_unsubscribe (p, id);
    return 0;
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

/* Composing with another priority plugin (flux-accounting's mf_priority).
 *
 * The job-manager calls every loaded plugin's job.state.priority and
 * job.priority.get on the same arguments, in load order: the last one
 * that sets a priority decides.  Loaded after such a plugin, this one
 * overrides it for released qpu jobs only and every other job keeps the
 * other plugin's priority.  Loaded before it, the other plugin's value
 * wins: a released job then sees its priority change (job.state.sched,
 * or a "priority" event when `flux account-priority-update` reprioritizes
 * all jobs), and it is set back here on the next turn of the reactor
 * (never from inside the job-manager's own reprioritization, which would
 * overwrite it), once per change, said once in the log with the order
 * that avoids it.
 */
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

    if (leave_depend_cb (p, topic, args, arg) < 0)
        return -1;
    if (ctx->conf.release_priority >= 0
        && flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:I}", "id", &id) == 0
        && (job = held_job_lookup (ctx, id))
        && job->released)
        (void)flux_jobtap_job_subscribe (p, id);
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
        flux_jobtap_job_unsubscribe (p, id);
    return 0;
}

static int query_cb (flux_plugin_t *p,
                     const char *topic,
                     flux_plugin_arg_t *args,
                     void *arg)
{
    struct quantum_ctx *ctx = arg;

    return flux_plugin_arg_pack (args,
                                 FLUX_PLUGIN_ARG_OUT,
                                 "{s:i s:I s:I s:I s:I s:{s:I s:i}}",
                                 "held", ctx->held,
                                 "released", (json_int_t)ctx->released,
                                 "failed", (json_int_t)ctx->failed,
                                 "cancelled", (json_int_t)ctx->cancelled,
                                 "priority-restored", (json_int_t)ctx->restored,
                                 "config",
                                   "release-priority",
                                   ctx->conf.release_priority,
                                   "max-held-per-user",
                                   ctx->conf.max_held_per_user);
}

/*  Services
 */

/* Collect the jobs named by "id" or "ids" into a JSON array of ints,
 * checking that each is held and that the requester may act on it.
 * All or nothing: on error nothing has been changed yet.
 */
static json_t *target_jobs (struct quantum_ctx *ctx,
                            const flux_msg_t *msg,
                            json_t *id,
                            json_t *ids,
                            char *errbuf,
                            size_t len)
{
    struct flux_msg_cred cred;
    json_t *list;
    json_t *targets = NULL;
    json_t *entry;
    size_t index;

    if (flux_msg_get_cred (msg, &cred) < 0) {
        snprintf (errbuf, len, "cannot read the requester's credentials");
        errno = EPROTO;
        return NULL;
    }
    if (!(list = qpu_target_ids (id, ids, errbuf, len)))
        return NULL;
    if (!(targets = json_array ()))
        goto nomem;
    json_array_foreach (list, index, entry) {
        struct held_job *job;
        flux_jobid_t jobid = (flux_jobid_t)json_integer_value (entry);

        if (!(job = held_job_lookup (ctx, jobid)) || !job->on_list) {
            char idbuf[32];
            flux_job_id_encode (jobid, "f58", idbuf, sizeof (idbuf));
            snprintf (errbuf,
                      len,
                      "job %s is not held for a QPU (unknown, released, "
                      "or finished)",
                      idbuf);
            errno = ENOENT;
            goto error;
        }
        if (flux_msg_cred_authorize (cred, job->userid) < 0) {
            char idbuf[32];
            flux_job_id_encode (jobid, "f58", idbuf, sizeof (idbuf));
            snprintf (errbuf,
                      len,
                      "job %s belongs to another user: only its owner or "
                      "the instance owner may act on it",
                      idbuf);
            errno = EPERM;
            goto error;
        }
        if (json_array_append (targets, entry) < 0)
            goto nomem;
    }
    json_decref (list);
    return targets;
nomem:
    snprintf (errbuf, len, "out of memory");
    errno = ENOMEM;
error:
    json_decref (targets);
    json_decref (list);
    return NULL;
}

static void list_cb (flux_t *h,
                     flux_msg_handler_t *mh,
                     const flux_msg_t *msg,
                     void *arg)
{
    struct quantum_ctx *ctx = arg;
    struct flux_msg_cred cred;
    struct held_job *job;
    json_t *payload;
    json_t *jobs = NULL;
    json_int_t seen;
    char errbuf[256] = "";

    if (flux_request_unpack (msg, NULL, "o", &payload) < 0
        || qpu_list_unpack (payload, &seen, errbuf, sizeof (errbuf)) < 0
        || flux_msg_get_cred (msg, &cred) < 0)
        goto error;
    if (seen >= 0 && (uint64_t)seen == ctx->generation) {
        if (flux_respond_pack (h,
                               msg,
                               "{s:b s:I}",
                               "unchanged", 1,
                               "generation", (json_int_t)ctx->generation) < 0)
            flux_log_error (h, "quantum: error responding to list");
        return;
    }
    if (!(jobs = json_array ()))
        goto nomem;
    for (job = ctx->head; job != NULL; job = job->next) {
        json_t *o;
        if (flux_msg_cred_authorize (cred, job->userid) < 0)
            continue;
        if (!(o = json_pack ("{s:I s:i s:O? s:f}",
                             "id", (json_int_t)job->id,
                             "userid", (int)job->userid,
                             "request", job->request,
                             "t_submit", job->t_submit))
            || (job->follow
                && json_object_set_new (o,
                                        "follow",
                                        json_integer ((json_int_t)job->follow))
                       < 0)
            || json_array_append_new (jobs, o) < 0) {
            json_decref (o);
            goto nomem;
        }
    }
    if (flux_respond_pack (h,
                           msg,
                           "{s:O s:I}",
                           "jobs", jobs,
                           "generation", (json_int_t)ctx->generation) < 0)
        flux_log_error (h, "quantum: error responding to list");
    json_decref (jobs);
    return;
nomem:
    errno = ENOMEM;
error:
    if (flux_respond_error (h, msg, errno, errbuf[0] ? errbuf : NULL) < 0)
        flux_log_error (h, "quantum: error responding to list");
    json_decref (jobs);
}

/* Answer a release, fail, records or events request: {KEY: [ids]} on success (targets
 * non-NULL), else errno with the message in errbuf if there is one.
 */
static void respond_jobs (flux_t *h,
                          const flux_msg_t *msg,
                          const char *key,
                          json_t *targets,
                          const char *errbuf)
{
    int rc;

    if (targets)
        rc = flux_respond_pack (h, msg, "{s:O}", key, targets);
    else
        rc = flux_respond_error (h, msg, errno, errbuf[0] ? errbuf : NULL);
    if (rc < 0)
        flux_log_error (h, "quantum: error responding to %s request", key);
}

/* The record of one held job for `records`: {id, jobspec, events}, or
 * NULL with errno set (ENOENT: not held, or its history is not known
 * here; EPERM: not the requester's).
 */
static json_t *job_record (struct quantum_ctx *ctx,
                           struct flux_msg_cred cred,
                           flux_jobid_t id)
{
    struct held_job *job;
    flux_plugin_arg_t *args;
    json_t *jobspec;
    json_t *o = NULL;

    if (!(job = held_job_lookup (ctx, id))
        || !job->on_list
        || !job->history_known) {
        errno = ENOENT;
        return NULL;
    }
    if (flux_msg_cred_authorize (cred, job->userid) < 0) {
        errno = EPERM;
        return NULL;
    }
    if (!(args = flux_jobtap_job_lookup (ctx->p, id)))
        return NULL;
    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:o}",
                                "jobspec", &jobspec) < 0)
        errno = EPROTO;
    else if (!(o = json_pack ("{s:I s:O s:o}",
                              "id", (json_int_t)id,
                              "jobspec", jobspec,
                              "events", job->history
                                            ? json_incref (job->history)
                                            : json_array ())))
        errno = ENOMEM;
    flux_plugin_arg_destroy (args);
    return o;
}

/* records {ids}: the jobspec and qpu-* events of the named held jobs
 * whose history this plugin knows; any other id is left out (the
 * caller looks it up in the eventlog).
 */
static void records_cb (flux_t *h,
                        flux_msg_handler_t *mh,
                        const flux_msg_t *msg,
                        void *arg)
{
    struct quantum_ctx *ctx = arg;
    struct flux_msg_cred cred;
    json_t *payload;
    json_t *ids;
    json_t *entry;
    json_t *jobs = NULL;
    size_t index;
    char errbuf[256] = "";

    if (flux_request_unpack (msg, NULL, "o", &payload) < 0
        || qpu_records_unpack (payload, &ids, errbuf, sizeof (errbuf)) < 0
        || flux_msg_get_cred (msg, &cred) < 0)
        goto error;
    if (!(jobs = json_array ()))
        goto nomem;
    json_array_foreach (ids, index, entry) {
        json_t *o;
        if (!(o = job_record (ctx,
                              cred,
                              (flux_jobid_t)json_integer_value (entry)))) {
            if (errno == ENOMEM)
                goto nomem;
            continue;
        }
        if (json_array_append_new (jobs, o) < 0) {
            json_decref (o);
            goto nomem;
        }
    }
    respond_jobs (h, msg, "jobs", jobs, "");
    json_decref (jobs);
    return;
nomem:
    errno = ENOMEM;
error:
    respond_jobs (h, msg, "jobs", NULL, errbuf);
    json_decref (jobs);
}

static int release_one (struct quantum_ctx *ctx,
                        struct held_job *job,
                        const char *task,
                        const char *device,
                        json_t *info,
                        json_t *resources)
{
    flux_plugin_t *p = ctx->p;
    flux_jobid_t id = job->id;
    json_t *update;
    json_t *context;
    int rc = -1;

    if (!(update = json_object ()) || !(context = json_object ())) {
        json_decref (update);
        errno = ENOMEM;
        return -1;
    }
    if ((task
         && (json_object_set_new (update,
                                  QPU_SYSTEM_PREFIX QPU_TASK_ATTR,
                                  json_string (task)) < 0
             || json_object_set_new (context,
                                     QPU_RELEASE_TASK,
                                     json_string (task)) < 0))
        || (device
            && (json_object_set_new (update,
                                     QPU_SYSTEM_PREFIX QPU_DEVICE_ATTR,
                                     json_string (device)) < 0
                || json_object_set_new (context,
                                        QPU_RELEASE_DEVICE,
                                        json_string (device)) < 0))
        || (info
            && json_object_set (update, QPU_SYSTEM_PREFIX QPU_INFO_ATTR, info)
                   < 0)
        || (resources && json_object_set (update, "resources", resources) < 0)) {
        errno = ENOMEM;
        goto out;
    }
    /* Without a task id, still mark the job released so a restart
     * does not hold it again.
     */
    if (!task
        && json_object_set_new (update,
                                QPU_SYSTEM_PREFIX QPU_TASK_ATTR,
                                json_string ("")) < 0) {
        errno = ENOMEM;
        goto out;
    }
    if (flux_jobtap_jobspec_update_id_pack (p, id, "O", update) < 0
        || flux_jobtap_event_post_pack (p, id, QPU_EVENT_RELEASE, "O", context)
               < 0)
        goto out;
    job->released = true;
    held_unlink (job);
    ctx->released++;
    /* May run the job through PRIORITY and SCHED before returning. */
    if (flux_jobtap_dependency_remove (p, id, QPU_DEPENDENCY_SCHEME) < 0)
        goto out;
    rc = 0;
out:
    json_decref (update);
    json_decref (context);
    return rc;
}

static void release_cb (flux_t *h,
                        flux_msg_handler_t *mh,
                        const flux_msg_t *msg,
                        void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *payload;
    struct qpu_release_args req;
    json_t *targets = NULL;
    json_t *entry;
    size_t index;
    char errbuf[256] = "";

    if (flux_request_unpack (msg, NULL, "o", &payload) < 0
        || qpu_release_unpack (payload, &req, errbuf, sizeof (errbuf)) < 0
        || !(targets = target_jobs (ctx,
                                    msg,
                                    req.id,
                                    req.ids,
                                    errbuf,
                                    sizeof (errbuf))))
        goto error;
    json_array_foreach (targets, index, entry) {
        flux_jobid_t jobid = (flux_jobid_t)json_integer_value (entry);
        struct held_job *job = held_job_lookup (ctx, jobid);
        if (!job || !job->on_list)
            continue; /* listed twice in 'ids' */
        if (release_one (ctx,
                         job,
                         req.task,
                         req.device,
                         req.info,
                         req.resources) < 0) {
            snprintf (errbuf,
                      sizeof (errbuf),
                      "releasing job %ju failed: %s",
                      (uintmax_t)jobid,
                      strerror (errno));
            goto error;
        }
    }
    respond_jobs (h, msg, "released", targets, errbuf);
    json_decref (targets);
    return;
error:
    respond_jobs (h, msg, "released", NULL, errbuf);
    json_decref (targets);
}

static void fail_cb (flux_t *h,
                     flux_msg_handler_t *mh,
                     const flux_msg_t *msg,
                     void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *payload;
    struct qpu_fail_args req;
    json_t *targets = NULL;
    json_t *entry;
    size_t index;
    char errbuf[256] = "";

    if (flux_request_unpack (msg, NULL, "o", &payload) < 0
        || qpu_fail_unpack (payload, &req, errbuf, sizeof (errbuf)) < 0
        || !(targets = target_jobs (ctx,
                                    msg,
                                    req.id,
                                    req.ids,
                                    errbuf,
                                    sizeof (errbuf))))
        goto error;
    json_array_foreach (targets, index, entry) {
        flux_jobid_t jobid = (flux_jobid_t)json_integer_value (entry);
        struct held_job *job = held_job_lookup (ctx, jobid);
        if (!job || !job->on_list)
            continue;
        /* Unlink first: the exception may destroy the job (and 'job'). */
        held_unlink (job);
        ctx->failed++;
        if (flux_jobtap_raise_exception (ctx->p,
                                         jobid,
                                         EXCEPTION_TYPE,
                                         0,
                                         "%s",
                                         req.note) < 0) {
            snprintf (errbuf,
                      sizeof (errbuf),
                      "failing job %ju failed: %s",
                      (uintmax_t)jobid,
                      strerror (errno));
            goto error;
        }
    }
    respond_jobs (h, msg, "failed", targets, errbuf);
    json_decref (targets);
    return;
error:
    respond_jobs (h, msg, "failed", NULL, errbuf);
    json_decref (targets);
}

/* Post one qpu-* event, {id, name, context?} (a request of `event`, or
 * an item of `events`).  On error, errno is set and errbuf may say why.
 */
static int post_event (struct quantum_ctx *ctx,
                       const flux_msg_t *msg,
                       json_t *item,
                       char *errbuf,
                       size_t len)
{
    struct qpu_event_args event;
    json_t *targets;
    json_t *empty = NULL;
    int rc = -1;

    if (qpu_event_unpack (item, &event, errbuf, len) < 0
        || !(targets = target_jobs (ctx, msg, event.id, NULL, errbuf, len)))
        return -1;
    if (!event.context && !(empty = json_object ()))
        errno = ENOMEM;
    else if (flux_jobtap_event_post_pack (ctx->p,
                                          (flux_jobid_t)json_integer_value (event.id),
                                          event.name,
                                          "O",
                                          event.context ? event.context : empty) == 0)
        rc = 0;
    json_decref (targets);
    json_decref (empty);
    return rc;
}

/* Record a handler milestone (device chosen, task submitted, queue
 * position, ...) in a held job's eventlog, where it persists across
 * restarts and the job's owner can read it.
 */
static void event_cb (flux_t *h,
                      flux_msg_handler_t *mh,
                      const flux_msg_t *msg,
                      void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *item;
    char errbuf[256] = "";

    if (flux_request_unpack (msg, NULL, "o", &item) < 0
        || post_event (ctx, msg, item, errbuf, sizeof (errbuf)) < 0) {
        if (flux_respond_error (h, msg, errno, errbuf[0] ? errbuf : NULL) < 0)
            flux_log_error (h, "quantum: error responding to event");
        return;
    }
    if (flux_respond (h, msg, NULL) < 0)
        flux_log_error (h, "quantum: error responding to event");
}

/* events {events: [{id, name, context?}, ...]}: many `event`s in one
 * message, each posted or refused on its own, in order.  The answer
 * has one entry per event: null, or {errno, error} for a refused one.
 */
static void events_cb (flux_t *h,
                       flux_msg_handler_t *mh,
                       const flux_msg_t *msg,
                       void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *payload;
    json_t *items;
    json_t *item;
    json_t *errors = NULL;
    size_t index;
    char errbuf[256] = "";

    if (flux_request_unpack (msg, NULL, "o", &payload) < 0
        || qpu_events_unpack (payload, &items, errbuf, sizeof (errbuf)) < 0)
        goto error;
    if (!(errors = json_array ()))
        goto nomem;
    json_array_foreach (items, index, item) {
        char why[256] = "";
        json_t *o;

        if (post_event (ctx, msg, item, why, sizeof (why)) == 0)
            o = json_null ();
        else
            o = json_pack ("{s:i s:s}",
                           "errno", errno,
                           "error", why[0] ? why : strerror (errno));
        if (!o || json_array_append_new (errors, o) < 0) {
            json_decref (o);
            goto nomem;
        }
    }
    respond_jobs (h, msg, "errors", errors, "");
    json_decref (errors);
    return;
nomem:
    errno = ENOMEM;
error:
    respond_jobs (h, msg, "errors", NULL, errbuf);
    json_decref (errors);
}

/* conf.update runs when the plugin is loaded: a failure here fails the
 * load and its message reaches the user (flux jobtap load).
 */
static int conf_update_cb (flux_plugin_t *p,
                           const char *topic,
                           flux_plugin_arg_t *args,
                           void *arg)
{
    struct quantum_ctx *ctx = arg;
    struct quantum_config conf;
    char errbuf[256];

    if (qpu_parse_config (flux_plugin_get_conf (p), &conf, errbuf, sizeof (errbuf))
        < 0)
        return flux_jobtap_error (p, args, "%s", errbuf);
    ctx->conf = conf;
    return 0;
}

static const struct flux_plugin_handler tab[] = {
    { "job.validate", validate_cb, NULL },
    { "job.new", new_cb, NULL },
    { "job.state.depend", depend_cb, NULL },
    { "job.dependency." QPU_DEPENDENCY_SCHEME, dependency_cb, NULL },
    { "job.state.priority", priority_state_cb, NULL },
    { "job.priority.get", priority_cb, NULL },
    { "job.state.sched", sched_cb, NULL },
    { "job.state.run", run_cb, NULL },
    { "job.state.cleanup", leave_depend_cb, NULL },
    { "job.event.*", job_event_cb, NULL },
    { "plugin.query", query_cb, NULL },
    { "conf.update", conf_update_cb, NULL },
    { 0 },
};

static void quantum_ctx_destroy (void *arg)
{
    struct quantum_ctx *ctx = arg;

    if (ctx) {
        int saved_errno = errno;
        /* Jobs' aux entries may outlive us: detach them from the list. */
        while (ctx->head)
            held_unlink (ctx->head);
        flux_watcher_destroy (ctx->restore_w);
        json_decref (ctx->restore);
        free (ctx);
        errno = saved_errno;
    }
}

int flux_plugin_init (flux_plugin_t *p)
{
    struct quantum_ctx *ctx;
    struct timespec now;

    if (flux_plugin_set_name (p, PLUGIN_NAME) < 0)
        return -1;
    if (!(ctx = calloc (1, sizeof (*ctx))))
        return -1;
    ctx->p = p;
    ctx->conf.release_priority = QPU_DEFAULT_RELEASE_PRIORITY;
    /* Start from the load time (microseconds x 1024), so a generation
     * seen from a plugin loaded earlier cannot match this one's unless
     * that one saw a million changes per millisecond since.
     */
    if (clock_gettime (CLOCK_REALTIME, &now) == 0)
        ctx->generation = ((uint64_t)now.tv_sec * 1000000
                           + (uint64_t)now.tv_nsec / 1000) << 10;
    if (flux_plugin_aux_set (p, NULL, ctx, quantum_ctx_destroy) < 0) {
        quantum_ctx_destroy (ctx);
        return -1;
    }
    if (!(ctx->restore_w = flux_timer_watcher_create (
              flux_get_reactor (flux_jobtap_get_flux (p)),
              0.,
              0.,
              restore_cb,
              ctx)))
        return -1;
    /* At load (a job-manager restart, flux jobtap load), meet active jobs
     * in reverse state order, then by id: a --dependency=qpu:JOBID
     * follower comes after the job it follows (released or held), so its
     * dependency check finds that job instead of logging an error.
     */
    if (flux_jobtap_set_load_sort_order (p, "-state") < 0)
        return -1;
    for (const struct flux_plugin_handler *h = tab; h->topic; h++) {
        if (flux_plugin_add_handler (p, h->topic, h->cb, ctx) < 0)
            return -1;
    }
    if (flux_jobtap_service_register_ex (p, "list", FLUX_ROLE_USER, list_cb, ctx)
            < 0
        || flux_jobtap_service_register_ex (p,
                                            "release",
                                            FLUX_ROLE_USER,
                                            release_cb,
                                            ctx) < 0
        || flux_jobtap_service_register_ex (p, "fail", FLUX_ROLE_USER, fail_cb, ctx)
               < 0
        || flux_jobtap_service_register_ex (p,
                                            "event",
                                            FLUX_ROLE_USER,
                                            event_cb,
                                            ctx) < 0
        || flux_jobtap_service_register_ex (p,
                                            "events",
                                            FLUX_ROLE_USER,
                                            events_cb,
                                            ctx) < 0
        || flux_jobtap_service_register_ex (p,
                                            "records",
                                            FLUX_ROLE_USER,
                                            records_cb,
                                            ctx) < 0)
        return -1;
    return 0;
}

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: the hold.
 *
 * Every job that carries attributes.system.qpu gets the dependency
 * "qpu" in job.state.depend and stays in DEPEND (no priority, no
 * scheduling, no nodes) until the handlers release or fail it through
 * the services.  A job submitted with --dependency=qpu:JOBID is held
 * the same way and rides JOBID's task.  This file checks a request at
 * submit, starts following a qpu job, adds the dependency, and drops
 * the job from the held set when it leaves DEPEND; it never decides
 * when a job is released.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <errno.h>
#include <string.h>

#include "qpu_protocol.h"
#include "qpu_request.h"
#include "quantum.h"

/* Reject a malformed or forged request, and a user over the site's
 * held-job limit.
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
        && held_count_for_user (ctx, userid) >= ctx->conf.max_held_per_user)
        return flux_jobtap_reject_job (p,
                                       args,
                                       "this site allows at most %d jobs per "
                                       "user held for a QPU; wait for some to "
                                       "be released",
                                       ctx->conf.max_held_per_user);
    return 0;
}

/* job.create: called at submit (before the job-manager checks its
 * dependencies), and for every active job after a job-manager restart
 * or a plugin load.  Start following a qpu job; a new submission's
 * other dependencies from now on.
 */
static int create_cb (flux_plugin_t *p,
                      const char *topic,
                      flux_plugin_arg_t *args,
                      void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *jobspec;
    json_t *system;
    json_t *request;
    flux_jobid_t id;
    flux_jobid_t leader = 0;
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
        return flux_jobtap_error (p, args, "quantum: cannot unpack job.create");
    system = qpu_jobspec_system (jobspec);
    request = json_object_get (system, QPU_REQUEST_ATTR);
    if (qpu_follow_target (system, &leader) < 0)
        leader = 0; /* rejected in job.dependency.qpu */
    if (!request && !leader)
        return 0;
    if (!(job = held_job_track (ctx, id, (uint32_t)userid, t_submit, request)))
        return flux_jobtap_error (p, args, "quantum: cannot track job");
    job->follow = leader;
    if (state == FLUX_JOB_STATE_NEW && quantum_deps_follow (job) < 0)
        flux_log_error (flux_jobtap_get_flux (p),
                        "quantum: job %ju: cannot follow its events",
                        (uintmax_t)id);
    return 0;
}

/* job.new: a new submission's qpu-* history is complete from here; any
 * other job was active before this plugin met it (quantum_rebuild).
 */
static int new_cb (flux_plugin_t *p,
                   const char *topic,
                   flux_plugin_arg_t *args,
                   void *arg)
{
    struct quantum_ctx *ctx = arg;
    json_t *jobspec;
    json_t *system;
    flux_jobid_t id;
    int state;
    struct held_job *job;

    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:o s:I s:i}",
                                "jobspec", &jobspec,
                                "id", &id,
                                "state", &state) < 0)
        return flux_jobtap_error (p, args, "quantum: cannot unpack job.new");
    if (!(job = held_job_lookup (ctx, id)))
        return 0;
    system = qpu_jobspec_system (jobspec);
    if (state == FLUX_JOB_STATE_NEW && !json_object_get (system, QPU_TASK_ATTR))
        quantum_history_start (job);
    else
        quantum_rebuild (p, job, system, state);
    return 0;
}

/* Add the "qpu" dependency to a tracked job and list it as held.
 * EEXIST means the hold survived a restart or a plugin reload.
 */
int quantum_hold (flux_plugin_t *p, struct held_job *job)
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
    if (quantum_hold (p, job) < 0) {
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
    if (quantum_hold (p, job) < 0)
        return flux_jobtap_reject_job (p,
                                       args,
                                       "quantum: cannot add qpu dependency: %s",
                                       strerror (errno));
    return 0;
}

/* A job leaves DEPEND through release (PRIORITY) or an exception
 * (CLEANUP, e.g. flux cancel).  Either way it is no longer held.
 */
int quantum_leave_depend_cb (flux_plugin_t *p,
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
        held_job_unsubscribe (job);
    return 0;
}

/* job.state.priority is quantum_priority.c's: it leaves DEPEND there.
 */
const struct flux_plugin_handler quantum_hold_tab[] = {
    { "job.create", create_cb, NULL },
    { "job.validate", validate_cb, NULL },
    { "job.new", new_cb, NULL },
    { "job.state.depend", depend_cb, NULL },
    { "job.dependency." QPU_DEPENDENCY_SCHEME, dependency_cb, NULL },
    { "job.state.cleanup", quantum_leave_depend_cb, NULL },
    { 0 },
};

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: the services and their owner checks.
 *
 * job-manager.quantum.METHOD, callable by guests.  A job's own user or
 * the instance owner may act on a job; anyone else gets EPERM and
 * nothing changes.  A request naming several jobs is all or nothing:
 * every job is checked before any is touched.
 *
 *   list     {generation?}                       -> {jobs:[...], generation}
 *            each job {id, userid, request, t_submit, follow?,
 *            dependencies?: [its other unresolved ones] or null}
 *   release  {id|ids, task?, device?, info?, resources?}
 *                                                -> {released:[...]}
 *   fail     {id|ids, note}                      -> {failed:[...]}
 *
 * `list` answers with the generation of the held set; a caller that
 * passes the generation it last saw gets {unchanged:true, generation}
 * instead of the jobs when nothing moved (a service polling 10,000
 * held jobs pays for one small message, not for 10,000 entries).
 * The qpu-* event services are quantum_history.c's.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "qpu_payload.h"
#include "qpu_protocol.h"
#include "quantum.h"

/* Write "job ƒX WHY" into errbuf and set errno.
 */
static void refuse_job (flux_jobid_t id,
                        int errnum,
                        const char *why,
                        char *errbuf,
                        size_t len)
{
    char idbuf[32];

    if (flux_job_id_encode (id, "f58", idbuf, sizeof (idbuf)) < 0)
        snprintf (idbuf, sizeof (idbuf), "%ju", (uintmax_t)id);
    snprintf (errbuf, len, "job %s %s", idbuf, why);
    errno = errnum;
}

json_t *quantum_target_jobs (struct quantum_ctx *ctx,
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
            refuse_job (jobid,
                        ENOENT,
                        "is not held for a QPU (unknown, released, or finished)",
                        errbuf,
                        len);
            goto error;
        }
        if (flux_msg_cred_authorize (cred, job->userid) < 0) {
            refuse_job (jobid,
                        EPERM,
                        "belongs to another user: only its owner or the "
                        "instance owner may act on it",
                        errbuf,
                        len);
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

void quantum_respond (flux_t *h,
                      const flux_msg_t *msg,
                      const char *key,
                      json_t *value,
                      const char *errbuf)
{
    int rc;

    if (value)
        rc = flux_respond_pack (h, msg, "{s:O}", key, value);
    else
        rc = flux_respond_error (h, msg, errno, errbuf[0] ? errbuf : NULL);
    if (rc < 0)
        flux_log_error (h, "quantum: error responding to %s request", key);
}

/* One held job as `list` shows it: its other dependencies too, while
 * it has any (null while they are not known yet).
 */
static json_t *list_entry (struct held_job *job)
{
    json_t *o;
    json_t *deps = NULL;

    if (quantum_deps_entry (job, &deps) < 0
        || !(o = json_pack ("{s:I s:i s:O? s:f}",
                            "id", (json_int_t)job->id,
                            "userid", (int)job->userid,
                            "request", job->request,
                            "t_submit", job->t_submit))) {
        json_decref (deps);
        return NULL;
    }
    /* json_object_set_new() takes deps even when it fails. */
    if (deps && json_object_set_new (o, "dependencies", deps) < 0)
        goto error;
    if (job->follow
        && json_object_set_new (o,
                                "follow",
                                json_integer ((json_int_t)job->follow)) < 0)
        goto error;
    return o;
error:
    json_decref (o);
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
        if (flux_msg_cred_authorize (cred, job->userid) < 0)
            continue;
        if (json_array_append_new (jobs, list_entry (job)) < 0)
            goto nomem;
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

/* What `release` writes into the jobspec (update) and the qpu-release
 * event (context).  Without a task id the job is still marked
 * released, so a restart does not hold it again.
 */
static int release_record (const struct qpu_release_args *req,
                           json_t *update,
                           json_t *context)
{
    if ((req->task
         && (json_object_set_new (update,
                                  QPU_SYSTEM_PREFIX QPU_TASK_ATTR,
                                  json_string (req->task)) < 0
             || json_object_set_new (context,
                                     QPU_RELEASE_TASK,
                                     json_string (req->task)) < 0))
        || (req->device
            && (json_object_set_new (update,
                                     QPU_SYSTEM_PREFIX QPU_DEVICE_ATTR,
                                     json_string (req->device)) < 0
                || json_object_set_new (context,
                                        QPU_RELEASE_DEVICE,
                                        json_string (req->device)) < 0))
        || (req->info
            && json_object_set (update, QPU_SYSTEM_PREFIX QPU_INFO_ATTR, req->info)
                   < 0)
        || (req->resources
            && json_object_set (update, "resources", req->resources) < 0)
        || (!req->task
            && json_object_set_new (update,
                                    QPU_SYSTEM_PREFIX QPU_TASK_ATTR,
                                    json_string ("")) < 0)) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

/* A release or fail request, as its parser hands it back.
 */
union held_request {
    struct qpu_release_args release;
    struct qpu_fail_args fail;
};

/* The jobs a request names: "id" or "ids" of its payload.
 */
struct held_targets {
    json_t *id;
    json_t *ids;
};

static int release_unpack (json_t *payload,
                           union held_request *req,
                           struct held_targets *targets,
                           char *errbuf,
                           size_t len)
{
    if (qpu_release_unpack (payload, &req->release, errbuf, len) < 0)
        return -1;
    targets->id = req->release.id;
    targets->ids = req->release.ids;
    return 0;
}

static int release_one (struct quantum_ctx *ctx,
                        struct held_job *job,
                        const union held_request *arg)
{
    const struct qpu_release_args *req = &arg->release;
    flux_plugin_t *p = ctx->p;
    flux_jobid_t id = job->id;
    json_t *update;
    json_t *context = NULL;
    int rc = -1;

    if (!(update = json_object ()) || !(context = json_object ())) {
        errno = ENOMEM;
        goto out;
    }
    if (release_record (req, update, context) < 0
        || flux_jobtap_jobspec_update_id_pack (p, id, "O", update) < 0
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

static int fail_unpack (json_t *payload,
                        union held_request *req,
                        struct held_targets *targets,
                        char *errbuf,
                        size_t len)
{
    if (qpu_fail_unpack (payload, &req->fail, errbuf, len) < 0)
        return -1;
    targets->id = req->fail.id;
    targets->ids = req->fail.ids;
    return 0;
}

static int fail_one (struct quantum_ctx *ctx,
                     struct held_job *job,
                     const union held_request *req)
{
    flux_jobid_t id = job->id;

    /* Unlink first: the exception may destroy the job (and 'job'). */
    held_unlink (job);
    ctx->failed++;
    return flux_jobtap_raise_exception (ctx->p,
                                        id,
                                        EXCEPTION_TYPE,
                                        0,
                                        "%s",
                                        req->fail.note);
}

/* What release and fail read, what they do to each job they name, and
 * how they answer.
 */
struct held_action {
    const char *key;  /* the answer: {KEY: [ids]} */
    const char *verb; /* the failure: "VERB job ID failed: ..." */
    int (*unpack) (json_t *payload,
                   union held_request *req,
                   struct held_targets *targets,
                   char *errbuf,
                   size_t len);
    int (*act) (struct quantum_ctx *ctx,
                struct held_job *job,
                const union held_request *req);
};

static const struct held_action release_action = {
    "released", "releasing", release_unpack, release_one,
};

static const struct held_action fail_action = {
    "failed", "failing", fail_unpack, fail_one,
};

/* The skeleton release and fail share: read the request, check every
 * job it names by id or ids (held, the requester's) before touching
 * any, act on each once, and answer with the ids or the first failure.
 */
static void act_on_held (struct quantum_ctx *ctx,
                         flux_t *h,
                         const flux_msg_t *msg,
                         const struct held_action *action)
{
    json_t *payload;
    union held_request req;
    struct held_targets named;
    json_t *targets = NULL;
    json_t *entry;
    size_t index;
    char errbuf[256] = "";

    if (flux_request_unpack (msg, NULL, "o", &payload) < 0
        || action->unpack (payload, &req, &named, errbuf, sizeof (errbuf)) < 0
        || !(targets = quantum_target_jobs (ctx,
                                            msg,
                                            named.id,
                                            named.ids,
                                            errbuf,
                                            sizeof (errbuf))))
        goto error;
    json_array_foreach (targets, index, entry) {
        flux_jobid_t jobid = (flux_jobid_t)json_integer_value (entry);
        struct held_job *job = held_job_lookup (ctx, jobid);

        if (!job || !job->on_list)
            continue; /* listed twice in 'ids' */
        if (action->act (ctx, job, &req) < 0) {
            snprintf (errbuf,
                      sizeof (errbuf),
                      "%s job %ju failed: %s",
                      action->verb,
                      (uintmax_t)jobid,
                      strerror (errno));
            goto error;
        }
    }
    quantum_respond (h, msg, action->key, targets, errbuf);
    json_decref (targets);
    return;
error:
    quantum_respond (h, msg, action->key, NULL, errbuf);
    json_decref (targets);
}

static void release_cb (flux_t *h,
                        flux_msg_handler_t *mh,
                        const flux_msg_t *msg,
                        void *arg)
{
    act_on_held (arg, h, msg, &release_action);
}

static void fail_cb (flux_t *h,
                     flux_msg_handler_t *mh,
                     const flux_msg_t *msg,
                     void *arg)
{
    act_on_held (arg, h, msg, &fail_action);
}

const struct quantum_service quantum_held_services[] = {
    { "list", list_cb },
    { "release", release_cb },
    { "fail", fail_cb },
    { 0 },
};

/* vi: ts=4 sw=4 expandtab
 */

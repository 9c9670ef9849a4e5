/************************************************************\
 * flux-quantum: a held job's qpu-* events.
 *
 * The handlers record their milestones (device chosen, task submitted,
 * idempotency token, queue position, ...) in a held job's eventlog
 * through `event` and `events`, where they persist across restarts and
 * the job's owner can read them.  For each held job seen from its
 * submission the plugin keeps its qpu-* entries (references to the
 * job-manager's own, not copies), and `records` answers them with the
 * job's current jobspec: a service adopting 10,000 held jobs after its
 * restart reads them in a few messages instead of 10,000 eventlog
 * lookups.  A job held before this plugin was loaded is left out of
 * `records`; the caller reads its eventlog.
 *
 *   event    {id, name:"qpu-*", context?}        -> {}
 *   events   {events:[{id, name, context?}...]}  -> {errors:[null|{errno,error}...]}
 *   records  {ids}                               -> {jobs:[{id, jobspec, events}...]}
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <errno.h>
#include <string.h>

#include "qpu_payload.h"
#include "qpu_protocol.h"
#include "quantum.h"

/* A new submission, subscribed to its events since job.create: every
 * qpu-* event it will get passes job_event_cb, so its history here is
 * complete.  (A job that was active before this plugin loaded is not.)
 */
void quantum_history_start (struct held_job *job)
{
    if (job->subscribed)
        job->history_known = true;
}

/* job.event.qpu-*: keep a held job's entry for `records`.
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
    }
    return 0;
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
        || !(targets = quantum_target_jobs (ctx, msg, event.id, NULL, errbuf, len)))
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

/* events: many `event`s in one message, each posted or refused on its
 * own, in order.  The answer has one entry per event: null, or
 * {errno, error} for a refused one.
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
    quantum_respond (h, msg, "errors", errors, "");
    json_decref (errors);
    return;
nomem:
    errno = ENOMEM;
error:
    quantum_respond (h, msg, "errors", NULL, errbuf);
    json_decref (errors);
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

/* records: any id that is not a held job of the requester's whose
 * history is known here is left out (the caller looks it up in the
 * eventlog).
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
    quantum_respond (h, msg, "jobs", jobs, "");
    json_decref (jobs);
    return;
nomem:
    errno = ENOMEM;
error:
    quantum_respond (h, msg, "jobs", NULL, errbuf);
    json_decref (jobs);
}

const struct flux_plugin_handler quantum_history_tab[] = {
    { "job.event." QPU_EVENT_PREFIX "*", job_event_cb, NULL },
    { 0 },
};

const struct quantum_service quantum_history_services[] = {
    { "event", event_cb },
    { "events", events_cb },
    { "records", records_cb },
    { 0 },
};

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: the parts of the "quantum" jobtap plugin.
 *
 * One concern a file, each found by name:
 *
 *   quantum.c           the plugin: its state, its handler table, its
 *                       configuration and query
 *   quantum_jobs.c      per-job state and the held set (the one owner
 *                       of the list and its generation)
 *   quantum_hold.c      the hold: submit checks, tracking, the "qpu"
 *                       dependency, followers, leaving DEPEND
 *   quantum_deps.c      a held job's other dependencies (after*,
 *                       begin-time, other plugins'), reported in list
 *   quantum_rebuild.c   the restart rebuild: a job met again after a
 *                       job-manager restart or a plugin load
 *   quantum_history.c   a held job's qpu-* events: posted for the
 *                       handlers, kept while held, answered in records
 *   quantum_services.c  the services, their owner checks, and list,
 *                       release and fail
 *   quantum_priority.c  a released job's priority, kept beside other
 *                       priority plugins
 *
 * The pure parsers (qpu_request.c, qpu_payload.c, qpu_config.c) are
 * shared with the fuzzers and include none of this.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#ifndef FLUX_QUANTUM_QUANTUM_H
#define FLUX_QUANTUM_QUANTUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <flux/core.h>
#include <flux/jobtap.h>
#include <jansson.h>

#include "qpu_config.h"

#define PLUGIN_NAME    "quantum"
#define EXCEPTION_TYPE "qpu"

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
     * changed (quantum_priority.c), set back on the next loop turn.
     */
    json_t *restore;
    flux_watcher_t *restore_w;
    uint64_t restored;
    bool restore_said;
    /* The job-manager's list of jobs and their dependencies, asked once
     * a load met held jobs it did not see submitted (quantum_deps.c).
     */
    flux_future_t *deps_f;
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
    json_t *deps;          /* its other unresolved dependencies (a set), or NULL */
    json_t *deps_gone;     /* removed while deps is not known yet */
    bool deps_known;       /* deps is the job's whole set */
    bool subscribed;       /* to its job.event.* callbacks */
    bool on_list;
    bool released;
};

/* quantum_jobs.c
 */
struct held_job *held_job_track (struct quantum_ctx *ctx,
                                 flux_jobid_t id,
                                 uint32_t userid,
                                 double t_submit,
                                 json_t *request);
struct held_job *held_job_lookup (struct quantum_ctx *ctx, flux_jobid_t id);
void held_link (struct held_job *job);
void held_unlink (struct held_job *job);
int held_count_for_user (struct quantum_ctx *ctx, uint32_t userid);
/* Its job.event.* callbacks, on or off (once: the job-manager would
 * call a plugin subscribed twice twice).
 */
int held_job_subscribe (struct held_job *job);
void held_job_unsubscribe (struct held_job *job);

/* Each concern's jobtap callbacks and services, registered by
 * quantum.c.  A service is job-manager.quantum.METHOD, callable by
 * guests (each checks who may act on a job: quantum_target_jobs).
 */
struct quantum_service {
    const char *method;
    flux_msg_handler_f cb;
};

extern const struct flux_plugin_handler quantum_hold_tab[];
extern const struct flux_plugin_handler quantum_history_tab[];
extern const struct flux_plugin_handler quantum_deps_tab[];
extern const struct flux_plugin_handler quantum_priority_tab[];
extern const struct quantum_service quantum_held_services[];
extern const struct quantum_service quantum_history_services[];

/* quantum_hold.c: add the "qpu" dependency and list the job as held;
 * drop a job that leaves DEPEND (job.state.priority and .cleanup).
 */
int quantum_hold (flux_plugin_t *p, struct held_job *job);
int quantum_leave_depend_cb (flux_plugin_t *p,
                             const char *topic,
                             flux_plugin_arg_t *args,
                             void *arg);

/* quantum_rebuild.c: the order in which a load meets active jobs, and
 * the state of a job met in job.new that was active before this
 * plugin saw it (a restart, a load).
 */
int quantum_rebuild_init (flux_plugin_t *p);
void quantum_rebuild (flux_plugin_t *p,
                      struct held_job *job,
                      json_t *system,
                      int state);

/* quantum_history.c: a new submission's qpu-* history is kept from
 * now on (it must be called in job.new, before any qpu-* event).
 */
void quantum_history_start (struct held_job *job);

/* quantum_deps.c: follow a job's other dependencies from its
 * submission (called in job.create, before any is added), or learn
 * them from the job-manager (a job met again after a restart or a
 * load).  quantum_deps_entry() sets what `list` shows of them: NULL
 * (none), an array of descriptions, or JSON null (not known yet).
 */
int quantum_deps_follow (struct held_job *job);
int quantum_deps_rebuild (struct held_job *job);
int quantum_deps_entry (struct held_job *job, json_t **entry);
void quantum_deps_fini (struct quantum_ctx *ctx);

/* quantum_services.c: the held jobs named by "id" or "ids" that the requester may act on,
 * as a JSON array of ints; all or nothing (NULL with errno and errbuf
 * set, and nothing changed).
 */
json_t *quantum_target_jobs (struct quantum_ctx *ctx,
                             const flux_msg_t *msg,
                             json_t *id,
                             json_t *ids,
                             char *errbuf,
                             size_t len);

/* Answer {KEY: value} (value non-NULL), else errno with errbuf's text
 * if it has any.
 */
void quantum_respond (flux_t *h,
                      const flux_msg_t *msg,
                      const char *key,
                      json_t *value,
                      const char *errbuf);

/* quantum_priority.c
 */
int quantum_priority_init (struct quantum_ctx *ctx);
void quantum_priority_fini (struct quantum_ctx *ctx);

#endif /* !FLUX_QUANTUM_QUANTUM_H */

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: the restart rebuild.
 *
 * After `flux module reload job-manager`, an instance restart with a
 * persistent statedir, or `flux jobtap load quantum.so`, the plugin
 * meets every active job again in job.new, with no memory of it.  Its
 * view is rebuilt from what persists: the jobspec (a released job has
 * attributes.system.qpu_task, written in the same jobspec-update as
 * its release) and the job's state (the "qpu" dependency itself lives
 * in the eventlog, so a job still in DEPEND without a task is still
 * held).  Its other dependencies are read once from the job-manager
 * (quantum_deps.c).  Counters start again at the load.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include "qpu_protocol.h"
#include "quantum.h"

/* At load, meet active jobs in reverse state order, then by id: a
 * --dependency=qpu:JOBID follower comes after the job it follows
 * (released or held), so its dependency check finds that job instead
 * of logging an error.
 */
int quantum_rebuild_init (flux_plugin_t *p)
{
    return flux_jobtap_set_load_sort_order (p, "-state");
}

void quantum_rebuild (flux_plugin_t *p,
                      struct held_job *job,
                      json_t *system,
                      int state)
{
    if (json_object_get (system, QPU_TASK_ATTR))
        job->released = true;
    else if (state == FLUX_JOB_STATE_DEPEND) {
        held_link (job);
        if (quantum_deps_rebuild (job) < 0)
            flux_log_error (flux_jobtap_get_flux (p),
                            "quantum: job %ju: cannot read its dependencies; "
                            "its task is created without waiting for them",
                            (uintmax_t)job->id);
    }
}

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: what the jobtap plugin reads of a job's jobspec.
 *
 * Pure functions of a jobspec's attributes.system: no flux handle,
 * no job-manager, no I/O.  quantum_hold.c calls them from job.validate and
 * job.new; jobtap/fuzz/ drives them with generated inputs.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#ifndef FLUX_QUANTUM_QPU_REQUEST_H
#define FLUX_QUANTUM_QPU_REQUEST_H

#include <stddef.h>

#include <flux/core.h>
#include <jansson.h>

/* The longest short-form request ("braket:sv1") the plugin accepts.
 */
#define QPU_MAX_SHORT_REQUEST 256

/* Return attributes.system of a jobspec, or NULL.
 */
json_t *qpu_jobspec_system (json_t *jobspec);

/* Check the part of a qpu request the plugin relies on (the full
 * grammar is the ingest validator's).  Returns 0, or -1 with a
 * one-sentence, user-facing message in errbuf.
 */
int qpu_check_request (json_t *system, char *errbuf, size_t len);

/* Set *leader to the job a --dependency=qpu:JOBID job follows (0 if
 * none).  Returns 0, or -1 if the value is not a job id.
 */
int qpu_follow_target (json_t *system, flux_jobid_t *leader);

#endif /* !FLUX_QUANTUM_QPU_REQUEST_H */

/* vi: ts=4 sw=4 expandtab
 */

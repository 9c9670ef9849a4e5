/************************************************************\
 * flux-quantum: the names the plugins share with the Python side.
 *
 * The jobtap plugin (quantum*.c) and the job-shell plugin
 * (shell_quantum.c) write and read a job's jobspec, eventlog and
 * environment in names the Python side defines.  Python is the
 * source; these are copies, and t/protocol/test_jobspec.py fails when one
 * drifts from its definition in:
 *
 *   src/flux_quantum/protocol/jobspec.py   attributes.system keys: the qpu
 *                                  request, the dependency scheme, the
 *                                  release record (qpu_task, qpu_device,
 *                                  qpu_info and its keys)
 *   src/flux_quantum/protocol/events.py     the qpu-* eventlog events
 *   src/flux_quantum/job/consumer.py   the FLUX_QPU_* task environment
 *
 * Add a name here only with its Python twin and its line in the test.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#ifndef FLUX_QUANTUM_QPU_PROTOCOL_H
#define FLUX_QUANTUM_QPU_PROTOCOL_H

/* A jobspec-update key names an attributes.system key with this prefix.
 */
#define QPU_SYSTEM_PREFIX "attributes.system."

/* What a user asks with: attributes.system.qpu, or
 * --dependency=qpu:JOBID to ride another job's task.
 */
#define QPU_REQUEST_ATTR      "qpu"
#define QPU_DEPENDENCY_SCHEME "qpu"

/* Written into attributes.system at release (the release record).
 */
#define QPU_TASK_ATTR   "qpu_task"
#define QPU_DEVICE_ATTR "qpu_device"
#define QPU_INFO_ATTR   "qpu_info"

/* Keys of qpu_info the job-shell plugin reads.
 */
#define QPU_INFO_VENDOR      "vendor"
#define QPU_INFO_TASKS       "tasks"
#define QPU_INFO_DEVICE_ID   "device_id"
#define QPU_INFO_RESERVATION "reservation"
#define QPU_RESERVATION_ARN  "arn"

/* Every flux-quantum event name starts with QPU_EVENT_PREFIX;
 * the plugin posts QPU_EVENT_RELEASE {task?, device?} itself.
 */
#define QPU_EVENT_PREFIX   "qpu-"
#define QPU_EVENT_RELEASE  "qpu-release"
#define QPU_RELEASE_TASK   "task"
#define QPU_RELEASE_DEVICE "device"

/* Set in every task of a released qpu job by the job-shell plugin.
 */
#define QPU_ENV_TASK   "FLUX_QPU_TASK"
#define QPU_ENV_TASKS  "FLUX_QPU_TASKS"
#define QPU_ENV_DEVICE "FLUX_QPU_DEVICE"
#define QPU_ENV_VENDOR "FLUX_QPU_VENDOR"

/* Set for a job released into a reserved window (qpu_info.reservation):
 * what the Braket SDK's DirectReservation context sets, so the job's own
 * tasks on that device carry the reservation's ARN.
 */
#define QPU_ENV_RESERVATION_DEVICE "AMZN_BRAKET_RESERVATION_DEVICE_ARN"
#define QPU_ENV_RESERVATION_ARN    "AMZN_BRAKET_RESERVATION_TIME_WINDOW_ARN"

#endif /* !FLUX_QUANTUM_QPU_PROTOCOL_H */

/* vi: ts=4 sw=4 expandtab
 */

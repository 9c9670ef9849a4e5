/************************************************************\
 * flux-quantum: the payloads of the jobtap plugin's services.
 *
 * Pure functions of a request's JSON payload: they check its shape
 * and hand back borrowed references into it; they never look a job
 * up, never change one and never respond.  The plugin's message
 * handlers (quantum_services.c, quantum_history.c) call them;
 * jobtap/fuzz/ drives them with generated and mutated payloads.
 * Every refusal sets errno (EPROTO for a payload of the wrong shape,
 * EINVAL for a bad event name) and writes one sentence into errbuf.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#ifndef FLUX_QUANTUM_QPU_PAYLOAD_H
#define FLUX_QUANTUM_QPU_PAYLOAD_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#define QPU_MAX_EVENT_NAME 64

/* release {id|ids, task?, device?, info?, resources?} */
struct qpu_release_args {
    json_t *id;
    json_t *ids;
    const char *task;
    const char *device;
    json_t *info;
    json_t *resources;
};

/* fail {id|ids, note} */
struct qpu_fail_args {
    json_t *id;
    json_t *ids;
    const char *note;
};

/* event {id, name:"qpu-*", context?}, or one item of events */
struct qpu_event_args {
    json_t *id;
    const char *name;
    json_t *context;
};

int qpu_list_unpack (json_t *payload,
                     json_int_t *generation,
                     char *errbuf,
                     size_t len);

int qpu_release_unpack (json_t *payload,
                        struct qpu_release_args *args,
                        char *errbuf,
                        size_t len);

int qpu_fail_unpack (json_t *payload,
                     struct qpu_fail_args *args,
                     char *errbuf,
                     size_t len);

int qpu_event_unpack (json_t *item,
                      struct qpu_event_args *args,
                      char *errbuf,
                      size_t len);

/* events {events: [...]}: *items is the array (each item is checked
 * on its own with qpu_event_unpack).
 */
int qpu_events_unpack (json_t *payload,
                       json_t **items,
                       char *errbuf,
                       size_t len);

/* records {ids: [int...]} */
int qpu_records_unpack (json_t *payload,
                        json_t **ids,
                        char *errbuf,
                        size_t len);

/* The job ids named by exactly one of id (an integer) or ids (a
 * non-empty array of integers), as a new array, or NULL (errno set:
 * EPROTO, or ENOMEM).
 */
json_t *qpu_target_ids (json_t *id, json_t *ids, char *errbuf, size_t len);

/* "qpu-" followed by lower-case letters, digits or '-', at most
 * QPU_MAX_EVENT_NAME characters in all.
 */
bool qpu_valid_event_name (const char *name);

#endif /* !FLUX_QUANTUM_QPU_PAYLOAD_H */

/* vi: ts=4 sw=4 expandtab
 */

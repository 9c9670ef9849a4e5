/************************************************************\
 * flux-quantum: the payloads of the jobtap plugin's services.
 *
 * See qpu_payload.h.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "qpu_payload.h"
#include "qpu_protocol.h"

/* Refuse a payload jansson could not unpack: what it takes, and
 * jansson's reason.
 */
static int refuse (const char *usage,
                   const json_error_t *error,
                   char *errbuf,
                   size_t len)
{
    snprintf (errbuf, len, "%s (%s)", usage, error->text);
    errno = EPROTO;
    return -1;
}

static int refuse_shape (const char *what, char *errbuf, size_t len)
{
    snprintf (errbuf, len, "%s", what);
    errno = EPROTO;
    return -1;
}

int qpu_list_unpack (json_t *payload,
                     json_int_t *generation,
                     char *errbuf,
                     size_t len)
{
    json_error_t error;

    *generation = -1;
    if (json_unpack_ex (payload,
                        &error,
                        0,
                        "{s?I}",
                        "generation", generation) < 0)
        return refuse ("list takes {generation?: an integer}",
                       &error,
                       errbuf,
                       len);
    return 0;
}

int qpu_release_unpack (json_t *payload,
                        struct qpu_release_args *args,
                        char *errbuf,
                        size_t len)
{
    json_error_t error;

    memset (args, 0, sizeof (*args));
    if (json_unpack_ex (payload,
                        &error,
                        0,
                        "{s?o s?o s?s s?s s?o s?o}",
                        "id", &args->id,
                        "ids", &args->ids,
                        "task", &args->task,
                        "device", &args->device,
                        "info", &args->info,
                        "resources", &args->resources) < 0)
        return refuse ("release takes {id or ids, task?, device?, info?, "
                       "resources?} with task and device strings",
                       &error,
                       errbuf,
                       len);
    if (args->info && !json_is_object (args->info))
        return refuse_shape ("'info' must be an object", errbuf, len);
    /* A new resources section (e.g. adding the QPU vertex the task
     * uses) goes to the scheduler with the released job.
     */
    if (args->resources
        && (!json_is_array (args->resources)
            || json_array_size (args->resources) == 0))
        return refuse_shape ("'resources' must be a non-empty jobspec "
                             "resources array",
                             errbuf,
                             len);
    return 0;
}

int qpu_fail_unpack (json_t *payload,
                     struct qpu_fail_args *args,
                     char *errbuf,
                     size_t len)
{
    json_error_t error;

    memset (args, 0, sizeof (*args));
    if (json_unpack_ex (payload,
                        &error,
                        0,
                        "{s?o s?o s:s}",
                        "id", &args->id,
                        "ids", &args->ids,
                        "note", &args->note) < 0)
        return refuse ("fail takes {id or ids, note: a string}",
                       &error,
                       errbuf,
                       len);
    return 0;
}

bool qpu_valid_event_name (const char *name)
{
    size_t n = strlen (name);
    size_t prefix = strlen (QPU_EVENT_PREFIX);

    if (n <= prefix || n > QPU_MAX_EVENT_NAME
        || strncmp (name, QPU_EVENT_PREFIX, prefix) != 0)
        return false;
    for (const char *c = name; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')
              || *c == '-'))
            return false;
    }
    return true;
}

int qpu_event_unpack (json_t *item,
                      struct qpu_event_args *args,
                      char *errbuf,
                      size_t len)
{
    json_error_t error;

    memset (args, 0, sizeof (*args));
    if (json_unpack_ex (item,
                        &error,
                        0,
                        "{s:o s:s s?o}",
                        "id", &args->id,
                        "name", &args->name,
                        "context", &args->context) < 0)
        return refuse ("an event is {id, name: a string, context?}",
                       &error,
                       errbuf,
                       len);
    if (!qpu_valid_event_name (args->name)) {
        snprintf (errbuf,
                  len,
                  "event name must be '" QPU_EVENT_PREFIX "' followed by "
                  "lower-case letters, digits or '-' (at most %d characters)",
                  QPU_MAX_EVENT_NAME);
        errno = EINVAL;
        return -1;
    }
    if (args->context && !json_is_object (args->context))
        return refuse_shape ("'context' must be an object", errbuf, len);
    return 0;
}

int qpu_events_unpack (json_t *payload,
                       json_t **items,
                       char *errbuf,
                       size_t len)
{
    json_error_t error;

    if (json_unpack_ex (payload, &error, 0, "{s:o}", "events", items) < 0)
        return refuse ("events takes {events: an array of events}",
                       &error,
                       errbuf,
                       len);
    if (!json_is_array (*items))
        return refuse_shape ("'events' must be an array of events",
                             errbuf,
                             len);
    return 0;
}

int qpu_records_unpack (json_t *payload,
                        json_t **ids,
                        char *errbuf,
                        size_t len)
{
    json_error_t error;
    json_t *entry;
    size_t index;

    if (json_unpack_ex (payload, &error, 0, "{s:o}", "ids", ids) < 0)
        return refuse ("records takes {ids: an array of job ids}",
                       &error,
                       errbuf,
                       len);
    if (!json_is_array (*ids))
        return refuse_shape ("'ids' must be an array of job ids", errbuf, len);
    json_array_foreach (*ids, index, entry) {
        if (!json_is_integer (entry))
            return refuse_shape ("job ids must be integers", errbuf, len);
    }
    return 0;
}

json_t *qpu_target_ids (json_t *id, json_t *ids, char *errbuf, size_t len)
{
    json_t *list;
    json_t *entry;
    size_t index;

    if ((id && ids) || (!id && !ids)) {
        refuse_shape ("give exactly one of 'id' or 'ids'", errbuf, len);
        return NULL;
    }
    if (ids && (!json_is_array (ids) || json_array_size (ids) == 0)) {
        refuse_shape ("'ids' must be a non-empty array of job ids",
                      errbuf,
                      len);
        return NULL;
    }
    json_array_foreach (ids, index, entry) {
        if (!json_is_integer (entry)) {
            refuse_shape ("job ids must be integers", errbuf, len);
            return NULL;
        }
    }
    if (id && !json_is_integer (id)) {
        refuse_shape ("job ids must be integers", errbuf, len);
        return NULL;
    }
    if (id)
        list = json_pack ("[O]", id);
    else
        list = json_incref (ids);
    if (!list) {
        snprintf (errbuf, len, "out of memory");
        errno = ENOMEM;
    }
    return list;
}

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: every pure parser of the jobtap plugin behind one
 * call.  See qpu_parsers.h.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qpu_config.h"
#include "qpu_payload.h"
#include "qpu_request.h"

#include "qpu_parsers.h"

const char *const qpu_parse_targets[] = {
    "request",  /* attributes.system: job.validate */
    "follow",   /* attributes.system: --dependency=qpu:JOBID */
    "config",   /* the plugin's load arguments (a JSON string of text) */
    "list",
    "release",
    "fail",
    "event",
    "events",
    "records",
    NULL,
};
const int qpu_parse_ntargets = 9;

static void broken (const char *target, const char *promise)
{
    fprintf (stderr, "qpu_parse_one %s: %s\n", target, promise);
    abort ();
}

/* A refusal: errno set, errbuf one non-empty line. */
static int refused (const char *target, int rc, char *errbuf, size_t len)
{
    if (rc == 0)
        return 0;
    if (rc != -1)
        broken (target, "returned neither 0 nor -1");
    if (errno == 0)
        broken (target, "refused without errno");
    if (len > 0) {
        if (errbuf[0] == '\0')
            broken (target, "refused without a reason");
        if (strnlen (errbuf, len) == len)
            broken (target, "reason not terminated");
        if (strchr (errbuf, '\n'))
            broken (target, "reason of more than one line");
    }
    return 1;
}

/* Every item of a target list is an integer the caller named. */
static void check_targets (const char *target, json_t *list, json_t *id)
{
    json_t *entry;
    size_t index;

    if (!json_is_array (list) || json_array_size (list) == 0)
        broken (target, "accepted ids are not a non-empty array");
    if (id && (json_array_size (list) != 1 || json_array_get (list, 0) != id))
        broken (target, "accepted id is not the one given");
    json_array_foreach (list, index, entry) {
        if (!json_is_integer (entry))
            broken (target, "accepted a job id that is not an integer");
    }
}

static int targets (const char *target,
                    json_t *id,
                    json_t *ids,
                    char *errbuf,
                    size_t len)
{
    json_t *list;

    errno = 0;
    if (!(list = qpu_target_ids (id, ids, errbuf, len)))
        return refused (target, -1, errbuf, len);
    check_targets (target, list, id);
    json_decref (list);
    return 0;
}

static int parse_request (json_t *input, char *errbuf, size_t len)
{
    int rc = qpu_check_request (input, errbuf, len);

    errno = EINVAL; /* qpu_check_request promises a reason, not errno */
    return refused ("request", rc, errbuf, len);
}

static int parse_follow (json_t *input, char *errbuf, size_t len)
{
    flux_jobid_t leader = 1;

    if (qpu_follow_target (input, &leader) < 0) {
        snprintf (errbuf, len, "--dependency=qpu:JOBID needs a job id");
        return 1;
    }
    if (!json_object_get (input, "dependencies") && leader != 0)
        broken ("follow", "a job without dependencies follows another");
    return 0;
}

static int parse_config (json_t *input, char *errbuf, size_t len)
{
    struct quantum_config conf;
    const char *text = json_string_value (input);

    if (qpu_parse_config (text, &conf, errbuf, len) < 0) {
        errno = EINVAL; /* qpu_parse_config promises a reason, not errno */
        return refused ("config", -1, errbuf, len);
    }
    if (conf.release_priority < -1
        || conf.release_priority > (int64_t)FLUX_JOB_PRIORITY_MAX
        || conf.max_held_per_user < 0
        || conf.max_held_per_user > 1000000)
        broken ("config", "accepted a value out of range");
    return 0;
}

static int parse_list (json_t *input, char *errbuf, size_t len)
{
    json_int_t generation;

    errno = 0;
    return refused ("list",
                    qpu_list_unpack (input, &generation, errbuf, len),
                    errbuf,
                    len);
}

static int parse_release (json_t *input, char *errbuf, size_t len)
{
    struct qpu_release_args args;

    errno = 0;
    if (refused ("release",
                 qpu_release_unpack (input, &args, errbuf, len),
                 errbuf,
                 len))
        return 1;
    if ((args.info && !json_is_object (args.info))
        || (args.resources && !json_is_array (args.resources)))
        broken ("release", "accepted info or resources of the wrong type");
    return targets ("release", args.id, args.ids, errbuf, len);
}

static int parse_fail (json_t *input, char *errbuf, size_t len)
{
    struct qpu_fail_args args;

    errno = 0;
    if (refused ("fail", qpu_fail_unpack (input, &args, errbuf, len), errbuf, len))
        return 1;
    if (!args.note)
        broken ("fail", "accepted without a note");
    return targets ("fail", args.id, args.ids, errbuf, len);
}

static int parse_event (json_t *input, char *errbuf, size_t len)
{
    struct qpu_event_args args;

    errno = 0;
    if (refused ("event", qpu_event_unpack (input, &args, errbuf, len), errbuf, len))
        return 1;
    if (!args.name || !qpu_valid_event_name (args.name)
        || strncmp (args.name, "qpu-", 4) != 0
        || (args.context && !json_is_object (args.context)))
        broken ("event", "accepted a bad name or context");
    return targets ("event", args.id, NULL, errbuf, len);
}

static int parse_events (json_t *input, char *errbuf, size_t len)
{
    json_t *items;
    json_t *item;
    size_t index;
    int refusals = 0;

    errno = 0;
    if (refused ("events", qpu_events_unpack (input, &items, errbuf, len), errbuf, len))
        return 1;
    /* As events_cb: each item on its own. */
    json_array_foreach (items, index, item) {
        char why[256] = "";
        refusals += parse_event (item, why, sizeof (why));
    }
    (void)refusals;
    return 0;
}

static int parse_records (json_t *input, char *errbuf, size_t len)
{
    json_t *ids;
    json_t *entry;
    size_t index;

    errno = 0;
    if (refused ("records", qpu_records_unpack (input, &ids, errbuf, len), errbuf, len))
        return 1;
    json_array_foreach (ids, index, entry) {
        if (!json_is_integer (entry))
            broken ("records", "accepted a job id that is not an integer");
    }
    return 0;
}

int qpu_parse_one (const char *target,
                   json_t *input,
                   char *errbuf,
                   size_t len)
{
    static const struct {
        const char *name;
        int (*parse) (json_t *input, char *errbuf, size_t len);
    } parsers[] = {
        { "request", parse_request },
        { "follow", parse_follow },
        { "config", parse_config },
        { "list", parse_list },
        { "release", parse_release },
        { "fail", parse_fail },
        { "event", parse_event },
        { "events", parse_events },
        { "records", parse_records },
    };

    if (len > 0)
        errbuf[0] = '\0';
    for (size_t i = 0; i < sizeof (parsers) / sizeof (parsers[0]); i++) {
        if (strcmp (target, parsers[i].name) == 0)
            return parsers[i].parse (input, errbuf, len);
    }
    return -1;
}

size_t qpu_parse_flags (const char *target)
{
    if (strcmp (target, "request") == 0 || strcmp (target, "follow") == 0)
        return JSON_DECODE_ANY;
    return JSON_DECODE_ANY | JSON_ALLOW_NUL;
}

int qpu_parse_text (const char *target,
                    const char *text,
                    char *errbuf,
                    size_t len)
{
    json_t *input;
    int rc;

    if (!(input = json_loads (text, qpu_parse_flags (target), NULL)))
        return 2;
    rc = qpu_parse_one (target, input, errbuf, len);
    json_decref (input);
    return rc;
}

/* vi: ts=4 sw=4 expandtab
 */

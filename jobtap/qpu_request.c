/************************************************************\
 * flux-quantum: what the jobtap plugin reads of a job's jobspec.
 *
 * See qpu_request.h.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <stdio.h>
#include <string.h>

#include "qpu_protocol.h"
#include "qpu_request.h"

json_t *qpu_jobspec_system (json_t *jobspec)
{
    json_t *attrs = json_object_get (jobspec, "attributes");
    return json_object_get (attrs, "system");
}

int qpu_check_request (json_t *system, char *errbuf, size_t len)
{
    json_t *qpu = json_object_get (system, QPU_REQUEST_ATTR);

    if (json_object_get (system, QPU_TASK_ATTR)
        || json_object_get (system, QPU_DEVICE_ATTR)
        || json_object_get (system, QPU_INFO_ATTR)) {
        snprintf (errbuf,
                  len,
                  QPU_SYSTEM_PREFIX QPU_TASK_ATTR ", " QPU_DEVICE_ATTR
                  " and " QPU_INFO_ATTR " are set by flux-quantum at release "
                  "and may not be given at submit");
        return -1;
    }
    if (!qpu)
        return 0;
    if (json_is_string (qpu)) {
        size_t n = json_string_length (qpu);
        if (n == 0 || n > QPU_MAX_SHORT_REQUEST) {
            snprintf (errbuf,
                      len,
                      "qpu must be a device name such as 'sv1', "
                      "'braket:sv1' or 'any' (1 to %d characters)",
                      QPU_MAX_SHORT_REQUEST);
            return -1;
        }
        return 0;
    }
    if (json_is_object (qpu))
        return 0;
    snprintf (errbuf,
              len,
              "qpu must be a device name such as 'sv1', 'braket:sv1' or "
              "'any', or a table given with --setattr=qpu.KEY=VALUE");
    return -1;
}

int qpu_follow_target (json_t *system, flux_jobid_t *leader)
{
    json_t *deps = json_object_get (system, "dependencies");
    json_t *dep;
    size_t index;

    *leader = 0;
    json_array_foreach (deps, index, dep) {
        const char *scheme = json_string_value (json_object_get (dep, "scheme"));
        const char *value = json_string_value (json_object_get (dep, "value"));
        if (!scheme || strcmp (scheme, QPU_DEPENDENCY_SCHEME) != 0)
            continue;
        if (!value || flux_job_id_parse (value, leader) < 0)
            return -1;
        return 0;
    }
    return 0;
}

/* vi: ts=4 sw=4 expandtab
 */

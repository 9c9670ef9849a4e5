/************************************************************\
 * flux-quantum: the jobtap plugin's configuration.
 *
 * See qpu_config.h.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "qpu_config.h"

/* The user's key as a message may show it: at most 64 characters, each
 * one that is not printable (a newline would split the message) as '?'.
 */
static void shown_key (const char *key, char *buf, size_t len)
{
    size_t i;

    for (i = 0; key[i] != '\0' && i < 64 && i + 1 < len; i++)
        buf[i] = isprint ((unsigned char)key[i]) ? key[i] : '?';
    buf[i] = '\0';
}

int qpu_parse_config (const char *s,
                      struct quantum_config *conf,
                      char *errbuf,
                      size_t len)
{
    json_t *o = NULL;
    json_error_t error;
    const char *key;
    json_t *value;
    int rc = -1;

    conf->release_priority = QPU_DEFAULT_RELEASE_PRIORITY;
    conf->max_held_per_user = 0;
    if (!s)
        return 0;
    if (!(o = json_loads (s, 0, &error)) || !json_is_object (o)) {
        snprintf (errbuf, len, "quantum: cannot parse plugin configuration");
        goto out;
    }
    json_object_foreach (o, key, value) {
        json_int_t v;
        if (strcmp (key, "release-priority") == 0) {
            if (!json_is_integer (value)
                || (v = json_integer_value (value)) < -1
                || v > (json_int_t)FLUX_JOB_PRIORITY_MAX) {
                snprintf (errbuf,
                          len,
                          "quantum: release-priority must be an integer "
                          "from 0 to %ju, or -1 to leave priority alone",
                          (uintmax_t)FLUX_JOB_PRIORITY_MAX);
                goto out;
            }
            conf->release_priority = v;
        }
        else if (strcmp (key, "max-held-per-user") == 0) {
            if (!json_is_integer (value)
                || (v = json_integer_value (value)) < 0 || v > 1000000) {
                snprintf (errbuf,
                          len,
                          "quantum: max-held-per-user must be an integer "
                          "from 0 (no limit) to 1000000");
                goto out;
            }
            conf->max_held_per_user = (int)v;
        }
        else {
            char shown[65];

            /* A key is the user's: the message stays one line. */
            shown_key (key, shown, sizeof (shown));
            snprintf (errbuf,
                      len,
                      "quantum: unknown configuration key '%s' (accepted: "
                      "release-priority, max-held-per-user)",
                      shown);
            goto out;
        }
    }
    rc = 0;
out:
    json_decref (o);
    return rc;
}

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: libFuzzer target for the jobtap plugin's parsers.
 *
 * The first byte picks the parser (qpu_parse_targets); the rest is
 * its input: JSON text decoded as the job-manager decodes it (a
 * jobspec with flags 0, a request payload with JSON_ALLOW_NUL), or,
 * for "config", the plugin's load arguments as raw text.  Inputs that
 * are not JSON are dropped (jansson's own fuzzing covers the decoder).
 * qpu_parse_one() abort()s on a broken promise; ASan/UBSan on any
 * invalid access or undefined behaviour.
 *
 * Build and run: python jobtap/fuzz/build_fuzz.py, see docs/reliability.md.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "qpu_parsers.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    const char *target;
    json_t *input;
    char errbuf[256];

    if (size < 1)
        return 0;
    target = qpu_parse_targets[data[0] % qpu_parse_ntargets];
    data++;
    size--;
    if (strcmp (target, "config") == 0) {
        char *text = malloc (size + 1);
        if (!text)
            return 0;
        memcpy (text, data, size);
        text[size] = '\0';
        input = json_stringn_nocheck (text, size);
        free (text);
    }
    else
        input = json_loadb ((const char *)data, size, qpu_parse_flags (target), NULL);
    if (!input)
        return 0;
    (void)qpu_parse_one (target, input, errbuf, sizeof (errbuf));
    json_decref (input);
    return 0;
}

/* vi: ts=4 sw=4 expandtab
 */

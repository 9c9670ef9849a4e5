/************************************************************\
 * flux-quantum: the jobtap plugin's configuration.
 *
 * Parsed from the plugin's load arguments, e.g.
 *   flux jobtap load quantum.so release-priority=4294967295
 * or conf = {...} in [job-manager] plugins.  A pure function: no
 * flux handle; quantum.c calls it from conf.update, jobtap/fuzz/
 * drives it with generated inputs.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#ifndef FLUX_QUANTUM_QPU_CONFIG_H
#define FLUX_QUANTUM_QPU_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <flux/core.h>

/* Released qpu jobs are scheduled ahead of ordinary work by default,
 * so a quantum result never waits for nodes (the two-queue problem the
 * other way round).  A negative value leaves priority alone.
 */
#define QPU_DEFAULT_RELEASE_PRIORITY ((int64_t)FLUX_JOB_PRIORITY_MAX)

struct quantum_config {
    int64_t release_priority;
    int max_held_per_user;
};

/* Set conf from the JSON object text s (NULL: the defaults).  Unknown
 * keys and bad values fail with a one-sentence message naming the key
 * in errbuf.  Returns 0 or -1.
 */
int qpu_parse_config (const char *s,
                      struct quantum_config *conf,
                      char *errbuf,
                      size_t len);

#endif /* !FLUX_QUANTUM_QPU_CONFIG_H */

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: every pure parser of the jobtap plugin behind one
 * call, for the fuzzer (fuzz_qpu.c) and the Python tests (ctypes).
 *
 * qpu_parse_one() runs the parser TARGET names on INPUT and checks
 * what every parser promises: a refusal sets errno and writes one
 * sentence (non-empty, one line, at most the buffer) into errbuf; an
 * acceptance leaves values of the documented types.  A broken promise
 * abort()s, so the fuzzer reports it as a crash.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#ifndef FLUX_QUANTUM_QPU_PARSERS_H
#define FLUX_QUANTUM_QPU_PARSERS_H

#include <stddef.h>

#include <jansson.h>

/* The targets, in the order the fuzzer's first input byte picks them. */
extern const char *const qpu_parse_targets[];
extern const int qpu_parse_ntargets;

/* Run TARGET on INPUT (for "config", INPUT is the configuration's
 * text as a JSON string).  Returns 0 (accepted), 1 (refused, reason in
 * errbuf), or -1 for an unknown target.
 */
int qpu_parse_one (const char *target,
                   json_t *input,
                   char *errbuf,
                   size_t len);

/* How the job-manager decodes TARGET's input: a jobspec with flags 0,
 * a request payload with JSON_ALLOW_NUL (and any JSON value, not only
 * objects, so the parsers meet those too).
 */
size_t qpu_parse_flags (const char *target);

/* The same, from JSON text (for ctypes): 2 if TEXT is not JSON.
 */
int qpu_parse_text (const char *target,
                    const char *text,
                    char *errbuf,
                    size_t len);

#endif /* !FLUX_QUANTUM_QPU_PARSERS_H */

/* vi: ts=4 sw=4 expandtab
 */

/************************************************************\
 * flux-quantum: the "quantum" jobtap plugin.
 *
 * Holds every job that carries attributes.system.qpu in the DEPEND
 * state with the dependency "qpu" until the flux-quantum handlers
 * (user space, running with the job owner's credentials) release it
 * through this plugin's services, or fail it.  A job may also ride
 * another qpu job's task (fan-out across jobs):
 *   flux submit --dependency=qpu:JOBID ...
 *
 * This plugin runs inside the job-manager: it never blocks, never
 * talks to a vendor, never holds a secret.  It parses only what it
 * needs to operate; the full qpu request grammar is checked at submit
 * by the flux-quantum ingest validator (one parser, in Python).
 *
 * This file is the plugin itself: its state, the tables of each
 * concern's callbacks and services (quantum.h lists the files), its
 * configuration and its query.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "qpu_config.h"
#include "quantum.h"

/* conf.update runs when the plugin is loaded: a failure here fails the
 * load and its message reaches the user (flux jobtap load).
 */
static int conf_update_cb (flux_plugin_t *p,
                           const char *topic,
                           flux_plugin_arg_t *args,
                           void *arg)
{
    struct quantum_ctx *ctx = arg;
    struct quantum_config conf;
    char errbuf[256];

    if (qpu_parse_config (flux_plugin_get_conf (p), &conf, errbuf, sizeof (errbuf))
        < 0)
        return flux_jobtap_error (p, args, "%s", errbuf);
    ctx->conf = conf;
    return 0;
}

static int query_cb (flux_plugin_t *p,
                     const char *topic,
                     flux_plugin_arg_t *args,
                     void *arg)
{
    struct quantum_ctx *ctx = arg;

    return flux_plugin_arg_pack (args,
                                 FLUX_PLUGIN_ARG_OUT,
                                 "{s:i s:I s:I s:I s:I s:{s:I s:i}}",
                                 "held", ctx->held,
                                 "released", (json_int_t)ctx->released,
                                 "failed", (json_int_t)ctx->failed,
                                 "cancelled", (json_int_t)ctx->cancelled,
                                 "priority-restored", (json_int_t)ctx->restored,
                                 "config",
                                   "release-priority",
                                   ctx->conf.release_priority,
                                   "max-held-per-user",
                                   ctx->conf.max_held_per_user);
}

static const struct flux_plugin_handler plugin_tab[] = {
    { "plugin.query", query_cb, NULL },
    { "conf.update", conf_update_cb, NULL },
    { 0 },
};

/* Each concern's callbacks.  Topics do not overlap: the first handler
 * whose glob matches a topic is the only one called.
 */
static const struct flux_plugin_handler *const handler_tabs[] = {
    plugin_tab,
    quantum_hold_tab,
    quantum_deps_tab,
    quantum_history_tab,
    quantum_priority_tab,
    NULL,
};

/* Each concern's services, job-manager.quantum.METHOD.
 */
static const struct quantum_service *const service_tabs[] = {
    quantum_held_services,
    quantum_history_services,
    NULL,
};

static void quantum_ctx_destroy (void *arg)
{
    struct quantum_ctx *ctx = arg;

    if (ctx) {
        int saved_errno = errno;
        /* Jobs' aux entries may outlive us: detach them from the list. */
        while (ctx->head)
            held_unlink (ctx->head);
        quantum_priority_fini (ctx);
        quantum_deps_fini (ctx);
        free (ctx);
        errno = saved_errno;
    }
}

static struct quantum_ctx *quantum_ctx_create (flux_plugin_t *p)
{
    struct quantum_ctx *ctx;
    struct timespec now;

    if (!(ctx = calloc (1, sizeof (*ctx))))
        return NULL;
    ctx->p = p;
    ctx->conf.release_priority = QPU_DEFAULT_RELEASE_PRIORITY;
    /* Start from the load time (microseconds x 1024), so a generation
     * seen from a plugin loaded earlier cannot match this one's unless
     * that one saw a million changes per millisecond since.
     */
    if (clock_gettime (CLOCK_REALTIME, &now) == 0)
        ctx->generation = ((uint64_t)now.tv_sec * 1000000
                           + (uint64_t)now.tv_nsec / 1000) << 10;
    return ctx;
}

int flux_plugin_init (flux_plugin_t *p)
{
    struct quantum_ctx *ctx;

    if (flux_plugin_set_name (p, PLUGIN_NAME) < 0
        || !(ctx = quantum_ctx_create (p)))
        return -1;
    if (flux_plugin_aux_set (p, NULL, ctx, quantum_ctx_destroy) < 0) {
        quantum_ctx_destroy (ctx);
        return -1;
    }
    if (quantum_priority_init (ctx) < 0 || quantum_rebuild_init (p) < 0)
        return -1;
    for (int i = 0; handler_tabs[i]; i++) {
        for (const struct flux_plugin_handler *h = handler_tabs[i]; h->topic; h++) {
            if (flux_plugin_add_handler (p, h->topic, h->cb, ctx) < 0)
                return -1;
        }
    }
    for (int i = 0; service_tabs[i]; i++) {
        for (const struct quantum_service *s = service_tabs[i]; s->method; s++) {
            if (flux_jobtap_service_register_ex (p,
                                                 s->method,
                                                 FLUX_ROLE_USER,
                                                 s->cb,
                                                 ctx) < 0)
                return -1;
        }
    }
    return 0;
}

/* vi: ts=4 sw=4 expandtab
 */

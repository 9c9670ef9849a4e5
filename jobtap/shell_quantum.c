/************************************************************\
 * flux-quantum: the "quantum" job-shell plugin.
 *
 * Puts the quantum task a qpu job was released with into the
 * environment of every task of the job, on every shell rank:
 *
 *   FLUX_QPU_TASK    the vendor task id (e.g. a Braket task ARN)
 *   FLUX_QPU_DEVICE  the catalog device name
 *   FLUX_QPU_TASKS   every task id of the job, space-separated
 *                    (one for a single task, several for a batch)
 *   FLUX_QPU_VENDOR  the vendor ("braket", "local")
 *
 * and, for a job released into a reserved window (Braket Direct,
 * qpu_info.reservation), the two variables the Braket SDK's
 * DirectReservation context sets, so that the job's own later tasks on
 * that device run in the window with no change to its code:
 *
 *   AMZN_BRAKET_RESERVATION_DEVICE_ARN       the device (qpu_info.device_id)
 *   AMZN_BRAKET_RESERVATION_TIME_WINDOW_ARN  the reservation's ARN
 *
 * (both unset otherwise, so a value from the submitter never survives).
 *
 * The quantum jobtap plugin records the task at release as jobspec
 * updates (attributes.system.qpu_task, qpu_device, qpu_info), posted
 * to the job's eventlog before the job can be allocated.  The shell
 * never sees them: it reads the signed original jobspec (J).  So for a
 * qpu job this plugin watches the job's eventlog from the moment it is
 * loaded from the initrc, collects the updates, and sets the
 * environment in shell.init once it has read up to the "alloc" event.
 * A one-shot lookup of the current jobspec is not enough: the job
 * manager acknowledges events before it commits them to the KVS, and
 * the KVS on a shell's broker rank may lag rank 0, so a lookup from a
 * shell can miss the release (seen on an 8-broker instance); the watch
 * waits until the eventlog on this rank holds everything up to "alloc".
 *
 * It must never break or slow an ordinary job: a job that did not ask
 * for a QPU (no attributes.system.qpu, no --dependency=qpu:JOBID) costs
 * one look at the jobspec the shell already holds, no RPC, no callback,
 * and its environment is left alone.  For a qpu job the shell waits for
 * the eventlog at most WATCH_TIMEOUT seconds; a failed watch is logged
 * and the job runs without the variables.
 *
 * Load it from the shell initrc, e.g. with a site drop-in
 * $sysconfdir/flux/shell/lua.d/flux-quantum.lua holding
 *     plugin.load { file = "/abs/path/shell_quantum.so" }
 * or by adding its directory to the conf.shell_pluginpath attribute.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#define FLUX_SHELL_PLUGIN_NAME "quantum"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flux/core.h>
#include <flux/shell.h>
#include <jansson.h>

#include "qpu_protocol.h"

#define AUX_WATCH     "flux-quantum::eventlog-watch"
#define WATCH_TIMEOUT 10.0

/* Return attributes.system of a jobspec, or NULL.
 */
static json_t *jobspec_system (json_t *jobspec)
{
    json_t *attrs = json_object_get (jobspec, "attributes");
    return json_object_get (attrs, "system");
}

/* A qpu job asked for a QPU itself or rides another job's task.
 */
static bool is_qpu_job (json_t *system)
{
    json_t *deps = json_object_get (system, "dependencies");
    json_t *dep;
    size_t index;

    if (json_object_get (system, QPU_REQUEST_ATTR))
        return true;
    json_array_foreach (deps, index, dep) {
        const char *scheme;
        scheme = json_string_value (json_object_get (dep, "scheme"));
        if (scheme && strcmp (scheme, QPU_DEPENDENCY_SCHEME) == 0)
            return true;
    }
    return false;
}

/* Join the strings of array 'tasks' with single spaces.
 * Returns NULL (errno set) on error, "" for an empty array.
 */
static char *join_tasks (json_t *tasks)
{
    json_t *entry;
    size_t index;
    size_t len = 1;
    char *s;
    char *cp;

    json_array_foreach (tasks, index, entry) {
        if (!json_is_string (entry)) {
            errno = EINVAL;
            return NULL;
        }
        len += json_string_length (entry) + 1;
    }
    if (!(s = calloc (1, len)))
        return NULL;
    cp = s;
    json_array_foreach (tasks, index, entry) {
        size_t n = json_string_length (entry);
        if (index > 0)
            *cp++ = ' ';
        memcpy (cp, json_string_value (entry), n);
        cp += n;
    }
    *cp = '\0';
    return s;
}

/* Set NAME to VALUE in the job environment, or unset it when VALUE is
 * NULL or empty, so a value inherited from the submitter's environment
 * (e.g. a job submitted from inside another qpu job) never survives.
 */
static int setenv_or_unset (flux_shell_t *shell,
                            const char *name,
                            const char *value)
{
    if (value && *value)
        return flux_shell_setenvf (shell, 1, name, "%s", value);
    if (flux_shell_getenv (shell, name))
        return flux_shell_unsetenv (shell, name);
    return 0;
}

/* The reserved window of qpu_info, if any: set both variables the SDK
 * reads, or unset both.
 */
static int set_reservation_environment (flux_shell_t *shell,
                                        const char *device_id,
                                        json_t *reservation)
{
    const char *arn = NULL;

    if (reservation
        && json_unpack (reservation, "{s:s}", QPU_RESERVATION_ARN, &arn) < 0) {
        shell_warn ("ignoring malformed " QPU_SYSTEM_PREFIX QPU_INFO_ATTR
                    "." QPU_INFO_RESERVATION);
        arn = NULL;
    }
    if (!arn || !device_id) {
        arn = NULL;
        device_id = NULL;
    }
    if (setenv_or_unset (shell, QPU_ENV_RESERVATION_DEVICE, device_id) < 0
        || setenv_or_unset (shell, QPU_ENV_RESERVATION_ARN, arn) < 0)
        return -1;
    return 0;
}

static void set_task_environment (flux_shell_t *shell, json_t *system)
{
    const char *task = NULL;
    const char *device = NULL;
    const char *vendor = NULL;
    const char *device_id = NULL;
    json_t *tasks = NULL;
    json_t *reservation = NULL;
    char *task_list = NULL;
    json_error_t error;

    if (json_unpack_ex (system,
                        &error,
                        0,
                        "{s?s s?s s?{s?s s?o s?s s?o}}",
                        QPU_TASK_ATTR, &task,
                        QPU_DEVICE_ATTR, &device,
                        QPU_INFO_ATTR,
                          QPU_INFO_VENDOR, &vendor,
                          QPU_INFO_TASKS, &tasks,
                          QPU_INFO_DEVICE_ID, &device_id,
                          QPU_INFO_RESERVATION, &reservation) < 0) {
        shell_warn ("unexpected qpu fields in jobspec: %s", error.text);
        return;
    }
    if (!task && !device) {
        shell_debug ("qpu job has no quantum task in its jobspec");
        return;
    }
    if (json_array_size (tasks) > 0 && !(task_list = join_tasks (tasks)))
        shell_warn ("ignoring malformed " QPU_SYSTEM_PREFIX QPU_INFO_ATTR
                    "." QPU_INFO_TASKS);
    if (setenv_or_unset (shell, QPU_ENV_TASK, task) < 0
        || setenv_or_unset (shell,
                            QPU_ENV_TASKS,
                            task_list ? task_list : task) < 0
        || setenv_or_unset (shell, QPU_ENV_DEVICE, device) < 0
        || setenv_or_unset (shell, QPU_ENV_VENDOR, vendor) < 0
        || set_reservation_environment (shell, device_id, reservation) < 0) {
        shell_log_errno ("failed to set FLUX_QPU_* environment");
    }
    else {
        shell_debug (QPU_ENV_TASK "=%s " QPU_ENV_DEVICE "=%s",
                     task ? task : "",
                     device ? device : "");
    }
    free (task_list);
}

/* Apply the attributes.system.* keys of a jobspec-update event context
 * to 'system' (key without the prefix -> value).
 */
static int apply_update (json_t *system, json_t *context)
{
    const char *key;
    json_t *value;
    size_t n = strlen (QPU_SYSTEM_PREFIX);

    json_object_foreach (context, key, value) {
        if (strncmp (key, QPU_SYSTEM_PREFIX, n) == 0
            && json_object_set (system, key + n, value) < 0)
            return -1;
    }
    return 0;
}

/* Read the watched eventlog until "alloc", collecting jobspec updates
 * into 'system'.  Returns 0 when "alloc" was seen, -1 (reason in
 * 'why') otherwise.
 */
static double monotime (void)
{
    struct timespec ts;

    clock_gettime (CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int read_until_alloc (flux_future_t *f,
                             json_t *system,
                             const char **why)
{
    double deadline = monotime () + WATCH_TIMEOUT;

    for (;;) {
        double remaining = deadline - monotime ();
        const char *text;
        json_t *entry;
        const char *name;
        json_t *context = NULL;
        int done;

        if (remaining < 0.)
            remaining = 0.;
        if (flux_future_wait_for (f, remaining) < 0) {
            *why = "no alloc event within the timeout";
            return -1;
        }
        if (flux_job_event_watch_get (f, &text) < 0) {
            *why = future_strerror (f, errno);
            return -1;
        }
        if (!(entry = json_loads (text, 0, NULL))
            || json_unpack (entry,
                            "{s:s s?o}",
                            "name", &name,
                            "context", &context) < 0) {
            json_decref (entry);
            *why = "malformed eventlog entry";
            return -1;
        }
        if (strcmp (name, "jobspec-update") == 0
            && apply_update (system, context) < 0) {
            json_decref (entry);
            *why = "out of memory";
            return -1;
        }
        done = strcmp (name, "alloc") == 0;
        json_decref (entry);
        if (done)
            return 0;
        flux_future_reset (f);
    }
}

/* shell.init: read the eventlog watched since load up to "alloc" and
 * set the environment.  flux_shell_setenvf() updates tasks already
 * created.
 */
static int qpu_env_init (flux_plugin_t *p,
                         const char *topic,
                         flux_plugin_arg_t *args,
                         void *arg)
{
    flux_shell_t *shell = flux_plugin_get_shell (p);
    flux_future_t *f = arg;
    json_t *system;
    const char *why = NULL;

    if (!(system = json_object ())) {
        shell_warn ("out of memory: FLUX_QPU_* not set");
        return 0;
    }
    if (read_until_alloc (f, system, &why) < 0)
        shell_warn ("job eventlog: %s: FLUX_QPU_* not set "
                    "(try `flux quantum task`)",
                    why);
    else
        set_task_environment (shell, system);
    json_decref (system);
    /* Stop the watch; the future is destroyed with the plugin.
     */
    if (flux_job_event_watch_cancel (f) == 0) {
        flux_future_reset (f);
        while (flux_future_wait_for (f, 1.) == 0
               && flux_job_event_watch_get (f, NULL) == 0)
            flux_future_reset (f);
    }
    return 0;
}

int flux_plugin_init (flux_plugin_t *p)
{
    flux_shell_t *shell;
    flux_t *h;
    flux_jobid_t id;
    json_t *jobspec;
    flux_future_t *f;

    if (flux_plugin_set_name (p, FLUX_SHELL_PLUGIN_NAME) < 0)
        return -1;
    if (!(shell = flux_plugin_get_shell (p))
        || flux_shell_info_unpack (shell,
                                   "{s:I s:o}",
                                   "jobid", &id,
                                   "jobspec", &jobspec) < 0)
        goto error;
    if (!is_qpu_job (jobspec_system (jobspec)))
        return 0;
    /* The updates live in the eventlog: start watching it now, read it
     * in shell.init, so the shell does not wait while it sets up
     * everything else.
     */
    if (!(h = flux_shell_get_flux (shell))
        || !(f = flux_job_event_watch (h, id, "eventlog", 0)))
        goto error;
    if (flux_plugin_aux_set (p,
                             AUX_WATCH,
                             f,
                             (flux_free_f)flux_future_destroy) < 0) {
        flux_future_destroy (f);
        goto error;
    }
    if (flux_plugin_add_handler (p, "shell.init", qpu_env_init, f) < 0)
        goto error;
    return 0;
error:
    /* Never fail the shell: the job runs, only without FLUX_QPU_*.
     */
    shell_log_errno ("FLUX_QPU_* will not be set");
    return 0;
}

/*
 * vi:tabstop=4 shiftwidth=4 expandtab
 */

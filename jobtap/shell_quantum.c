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
 * The quantum jobtap plugin records the task at release as jobspec
 * updates (attributes.system.qpu_task, qpu_device, qpu_info).  The
 * shell never sees them: it reads the signed original jobspec (J).  So
 * for a qpu job this plugin asks job-info for the current jobspec once,
 * when it is loaded from the initrc, and sets the environment in
 * shell.init, by which time the answer is normally there.
 *
 * It must never break or slow an ordinary job: a job that did not ask
 * for a QPU (no attributes.system.qpu, no --dependency=qpu:JOBID) costs
 * one look at the jobspec the shell already holds, no RPC, no callback,
 * and its environment is left alone.  For a qpu job the shell waits for
 * the lookup at most LOOKUP_TIMEOUT seconds; a failed lookup is logged
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

#include <flux/core.h>
#include <flux/shell.h>
#include <jansson.h>

#define DEPENDENCY_SCHEME "qpu"
#define AUX_LOOKUP        "flux-quantum::jobspec-lookup"
#define LOOKUP_TIMEOUT    10.0

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

    if (json_object_get (system, "qpu"))
        return true;
    json_array_foreach (deps, index, dep) {
        const char *scheme;
        scheme = json_string_value (json_object_get (dep, "scheme"));
        if (scheme && strcmp (scheme, DEPENDENCY_SCHEME) == 0)
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

static void set_task_environment (flux_shell_t *shell, json_t *system)
{
    const char *task = NULL;
    const char *device = NULL;
    const char *vendor = NULL;
    json_t *tasks = NULL;
    char *task_list = NULL;
    json_error_t error;

    if (json_unpack_ex (system,
                        &error,
                        0,
                        "{s?s s?s s?{s?s s?o}}",
                        "qpu_task", &task,
                        "qpu_device", &device,
                        "qpu_info",
                          "vendor", &vendor,
                          "tasks", &tasks) < 0) {
        shell_warn ("unexpected qpu fields in jobspec: %s", error.text);
        return;
    }
    if (!task && !device) {
        shell_debug ("qpu job has no quantum task in its jobspec");
        return;
    }
    if (json_array_size (tasks) > 0 && !(task_list = join_tasks (tasks)))
        shell_warn ("ignoring malformed attributes.system.qpu_info.tasks");
    if (setenv_or_unset (shell, "FLUX_QPU_TASK", task) < 0
        || setenv_or_unset (shell,
                            "FLUX_QPU_TASKS",
                            task_list ? task_list : task) < 0
        || setenv_or_unset (shell, "FLUX_QPU_DEVICE", device) < 0
        || setenv_or_unset (shell, "FLUX_QPU_VENDOR", vendor) < 0) {
        shell_log_errno ("failed to set FLUX_QPU_* environment");
    }
    else {
        shell_debug ("FLUX_QPU_TASK=%s FLUX_QPU_DEVICE=%s",
                     task ? task : "",
                     device ? device : "");
    }
    free (task_list);
}

/* shell.init: collect the jobspec lookup sent at load time and set the
 * environment.  flux_shell_setenvf() updates tasks already created.
 */
static int qpu_env_init (flux_plugin_t *p,
                         const char *topic,
                         flux_plugin_arg_t *args,
                         void *arg)
{
    flux_shell_t *shell = flux_plugin_get_shell (p);
    flux_future_t *f = arg;
    json_t *jobspec;

    if (flux_future_wait_for (f, LOOKUP_TIMEOUT) < 0) {
        shell_warn ("no answer from job-info within %.0fs: "
                    "FLUX_QPU_* not set (try `flux quantum task`)",
                    LOOKUP_TIMEOUT);
        return 0;
    }
    if (flux_rpc_get_unpack (f, "{s:o}", "jobspec", &jobspec) < 0) {
        shell_warn ("jobspec lookup failed: %s: FLUX_QPU_* not set",
                    future_strerror (f, errno));
        return 0;
    }
    set_task_environment (shell, jobspec_system (jobspec));
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
    /* The updates live in the eventlog: ask for the current jobspec.
     * Sent now, collected in shell.init, so the shell does not wait
     * for it while it sets up everything else.
     */
    if (!(h = flux_shell_get_flux (shell))
        || !(f = flux_rpc_pack (h,
                                "job-info.lookup",
                                FLUX_NODEID_ANY,
                                0,
                                "{s:I s:[s] s:i}",
                                "id", (json_int_t)id,
                                "keys", "jobspec",
                                "flags", FLUX_JOB_LOOKUP_JSON_DECODE
                                         | FLUX_JOB_LOOKUP_CURRENT)))
        goto error;
    if (flux_plugin_aux_set (p,
                             AUX_LOOKUP,
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

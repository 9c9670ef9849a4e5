#!/bin/bash
# flux-broker, with the quantum plugin and validator loaded: bench/flux_core_suite.py puts
# this file's folder first on FLUX_EXEC_PATH (FLUX_EXEC_PATH_PREPEND), as flux-broker.
#
# It finds the next flux-broker on FLUX_EXEC_PATH (flux-core's build tree under `make
# check`) and starts it with $FLUXQ_SUITE_CONF/quantum.toml (as `flux quantum config`
# prints it) in its configuration: where the test gives a config folder (-c DIR,
# --config-path=DIR, or FLUX_CONF_DIR), the file is dropped into that folder as
# flux-quantum.toml, so the test's own later edits and `flux config reload` work as
# they do without it; a config
# file (-c FILE) is copied beside ours into a new folder; no config, ours alone. A
# broker started as a job (flux alloc/batch inside a test: FLUX_JOB_ID is set) is left
# as the test configured it. It changes nothing else.
set -euo pipefail
self_dir=$(cd "$(dirname "$0")" && pwd)
real=""
IFS=: read -r -a path <<<"${FLUX_EXEC_PATH:-}"
for dir in "${path[@]}"; do
    [ -n "$dir" ] || continue
    [ "$(cd "$dir" 2>/dev/null && pwd)" = "$self_dir" ] && continue
    if [ -x "$dir/flux-broker" ]; then
        real="$dir/flux-broker"
        break
    fi
done
[ -n "$real" ] || { echo "flux-broker wrapper: no flux-broker on FLUX_EXEC_PATH" >&2; exit 1; }
if [ -n "${FLUX_JOB_ID:-}" ]; then exec "$real" "$@"; fi

ours="$FLUXQ_SUITE_CONF/quantum.toml"
conf=""
with_conf() {
    if [ -d "$1" ]; then
        if [ ! -e "$1/flux-quantum.toml" ]; then cp "$ours" "$1/flux-quantum.toml"; fi
        conf="$1"
    else
        conf=$(mktemp -d "${FLUXQ_SUITE_TMP:-/tmp}/conf.XXXXXX")
        cp "$ours" "$conf/flux-quantum.toml"
        if [ -e "$1" ]; then cp "$1" "$conf/test-$(basename "$1")"; fi
    fi
}
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        -c) with_conf "$2"; shift 2 ;;
        -c*) with_conf "${1#-c}"; shift ;;
        --config-path=*) with_conf "${1#--config-path=}"; shift ;;
        --config-path) with_conf "$2"; shift 2 ;;
        -*) args+=("$1"); shift ;;
        *) break ;; # the initial program and its arguments (bash -c ...): not ours
    esac
done
args+=("$@")
# No -c: the broker would read FLUX_CONF_DIR, the test's folder when it set one.
if [ -z "$conf" ]; then with_conf "${FLUX_CONF_DIR:-$FLUXQ_SUITE_CONF/none}"; fi
echo "$real -c $conf" >>"${FLUXQ_SUITE_TMP:-/tmp}/brokers.log"
exec "$real" -c "$conf" "${args[@]}"

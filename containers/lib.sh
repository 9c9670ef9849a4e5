# Shared by containers/build-base and containers/check (sourced, not run).
# Timing, content hashes for image tags, and the docker preconditions.

CONTAINERS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROJECT_DIR=$(cd "$CONTAINERS_DIR/.." && pwd)
BUILD_DIR=${FLUXQ_BUILD_DIR:-$CONTAINERS_DIR/build}
# The legacy builder: dockerd from Debian has no buildx beside it.
export DOCKER_BUILDKIT=0

# Exit codes a caller (t/test_containers.py, .ci/run) can tell apart.
EXIT_NO_DOCKER=77

_t0=$(date +%s)
_step_t0=$_t0
STEP_LOG=()

say() { printf 'containers: %s\n' "$*" >&2; }
die() { printf 'containers: ERROR: %s\n' "$*" >&2; exit 1; }

# step NAME: close the previous step (recording its duration) and open NAME.
_step_name=""
step() {
    local now
    now=$(date +%s)
    if [ -n "$_step_name" ]; then
        STEP_LOG+=("$(printf '%-34s %5ss' "$_step_name" $((now - _step_t0)))")
    fi
    _step_name=$1
    _step_t0=$now
    [ -n "$1" ] && say "== $1"
    return 0
}

print_timings() {
    step ""
    say "timings:"
    local line
    for line in "${STEP_LOG[@]}"; do
        say "  $line"
    done
    say "  $(printf '%-34s %5ss' total $(($(date +%s) - _t0)))"
}

# hash_of FILE|-...: a short content hash of the given files/stdin, for image tags.
hash_of() {
    cat "$@" | sha256sum | cut -c1-16
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# require_docker: docker CLI present and a daemon answering; start dockerd
# (as root) when it is installed but not running.  Exits EXIT_NO_DOCKER
# with one loud line when Docker cannot be had.
require_docker() {
    if ! command -v docker >/dev/null 2>&1 || ! command -v dockerd >/dev/null 2>&1; then
        echo "!!!!! containers: SKIPPED: Docker is not installed (apt-get install -y docker.io docker-compose debootstrap) !!!!!" >&2
        exit "$EXIT_NO_DOCKER"
    fi
    if docker info >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "!!!!! containers: SKIPPED: dockerd is not running and only root can start it !!!!!" >&2
        exit "$EXIT_NO_DOCKER"
    fi
    say "starting dockerd --storage-driver=vfs (log: $BUILD_DIR/dockerd.log)"
    mkdir -p "$BUILD_DIR"
    # setsid: dockerd outlives this script, like a system service would.
    setsid dockerd --storage-driver=vfs >"$BUILD_DIR/dockerd.log" 2>&1 </dev/null &
    local i
    for i in $(seq 1 60); do
        docker info >/dev/null 2>&1 && return 0
        sleep 1
    done
    echo "!!!!! containers: SKIPPED: dockerd did not start within 60 s (see $BUILD_DIR/dockerd.log) !!!!!" >&2
    exit "$EXIT_NO_DOCKER"
}

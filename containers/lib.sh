# Shared by containers/build-base and containers/check (sourced, not run).
# Timing, content hashes for image tags, the docker preconditions, and where
# release sources come from.

CONTAINERS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROJECT_DIR=$(cd "$CONTAINERS_DIR/.." && pwd)
BUILD_DIR=${FLUXQ_BUILD_DIR:-$CONTAINERS_DIR/build}
# The legacy builder: dockerd from Debian has no buildx beside it.
export DOCKER_BUILDKIT=0

# Exit codes a caller (t/containers/test_containers.py, .ci/run) can tell apart.
EXIT_NO_DOCKER=77
EXIT_NO_HOST_FLUX=3 # build-base --host: the host's Flux cannot go into the base

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

# --- release sources: the cache, a git mirror, a download -------------------------
# Shared by build-base (flux-security, flux-core, flux-sched) and check
# (flux-accounting).  sources_init first; then source_archive NAME VERSION
# MIRROR_VARIABLE [EXCLUDE] for each project: SOURCE[NAME] is its archive, or
# NAME-VERSION is added to `missing`.
SOURCE_CACHE=${FLUXQ_SOURCE_CACHE:-/var/cache/flux-quantum/sources}
DOWNLOAD_TIMEOUT=${FLUXQ_DOWNLOAD_TIMEOUT:-300}
RELEASES=https://github.com/flux-framework

# sources_init: where archives are looked for (CACHE_DIRS) and written (WRITE_DIR):
# the cache, or $BUILD_DIR/sources where the cache cannot be written (not root).
sources_init() {
    case "$DOWNLOAD_TIMEOUT" in
    '' | *[!0-9]*) die "FLUXQ_DOWNLOAD_TIMEOUT must be a number of seconds, not '$DOWNLOAD_TIMEOUT'." ;;
    esac
    download_failed="" # why the first failed download failed; later ones are not tried
    missing=()
    declare -gA SOURCE
    CACHE_DIRS=("$SOURCE_CACHE")
    WRITE_DIR=$SOURCE_CACHE
    if ! mkdir -p "$SOURCE_CACHE" 2>/dev/null || [ ! -w "$SOURCE_CACHE" ]; then
        WRITE_DIR=$BUILD_DIR/sources
        CACHE_DIRS+=("$WRITE_DIR")
        say "$SOURCE_CACHE cannot be written here: new archives go to $WRITE_DIR"
        mkdir -p "$WRITE_DIR"
    fi
}

# cached NAME VERSION: the path of a usable archive in the cache, or nothing.
cached() {
    local dir f
    for dir in "${CACHE_DIRS[@]}"; do
        for f in "$dir/$1-$2.tar.gz" "$dir/$1-$2-git.tar.gz"; do
            [ -s "$f" ] && { echo "$f"; return 0; }
        done
    done
    return 0
}

# from_mirror NAME VERSION GITDIR [EXCLUDE]: archive tag vVERSION of GITDIR into
# the cache as the release tarball would unpack (NAME-VERSION/...).
from_mirror() {
    local out=$WRITE_DIR/$1-$2-git.tar.gz
    git -C "$3" rev-parse --verify --quiet "v$2^{commit}" >/dev/null ||
        { say "$3 is not a git directory holding tag v$2"; return 1; }
    say "archiving $1 v$2 from the git mirror $3"
    # A mirror may lack a large test data file (a partial snapshot of
    # flux-core lacks t/resource/resource.eventlog.thing1): it is excluded, and
    # git's complaint that the blob is missing is dropped; the build does not
    # need it.
    local err=$BUILD_DIR/git-archive.err
    if ! git -C "$3" archive --format=tar.gz --prefix="$1-$2/" -o "$out.tmp" "v$2" -- . \
        ${4:+":(exclude)$4"} 2>"$err"; then
        cat "$err" >&2
        rm -f "$out.tmp"
        say "git archive of $1 v$2 from $3 failed"
        return 1
    fi
    if [ -n "${4:-}" ]; then grep -v -F "$4" "$err" >&2 || true; else cat "$err" >&2; fi
    mv "$out.tmp" "$out"
}

# download NAME VERSION: the release tarball from GitHub into the cache.
download() {
    local url=$RELEASES/$1/releases/download/v$2/$1-$2.tar.gz
    local out=$WRITE_DIR/$1-$2.tar.gz err
    [ -z "$download_failed" ] || return 1
    if [ "$DOWNLOAD_TIMEOUT" -eq 0 ]; then
        download_failed="downloads are off (FLUXQ_DOWNLOAD_TIMEOUT=0)"
        return 1
    fi
    command -v curl >/dev/null || { download_failed="curl is not installed"; return 1; }
    say "downloading $url (at most ${DOWNLOAD_TIMEOUT}s)"
    if ! err=$(curl -fsSL --connect-timeout 30 --max-time "$DOWNLOAD_TIMEOUT" -o "$out.tmp" "$url" 2>&1) ||
        ! gzip -t "$out.tmp" 2>/dev/null; then
        rm -f "$out.tmp"
        download_failed="downloading $url failed: ${err:-not a gzip archive}"
        say "$download_failed"
        return 1
    fi
    mv "$out.tmp" "$out"
}

# source_archive NAME VERSION MIRROR_VARIABLE [EXCLUDE]: find or make NAME's archive.
source_archive() {
    local name=$1 version=$2 var=$3 exclude=${4:-} f gitdir
    gitdir=${!var:-}
    f=$(cached "$name" "$version")
    if [ -z "$f" ] && [ -n "$gitdir" ] && from_mirror "$name" "$version" "$gitdir" "$exclude"; then
        f=$WRITE_DIR/$name-$version-git.tar.gz
    fi
    if [ -z "$f" ] && download "$name" "$version"; then
        f=$WRITE_DIR/$name-$version.tar.gz
    fi
    if [ -z "$f" ]; then
        missing+=("$name-$version")
        return 0
    fi
    say "$name $version: $f"
    SOURCE[$name]=$f
}

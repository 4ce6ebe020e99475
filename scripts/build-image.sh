#!/usr/bin/env bash
# Build the grader image (default tag grader:local) from the Dockerfile at the repository root.
#
# Two modes, chosen automatically (override with GRADER_BUILD_MODE=registry|offline):
#   registry  python:3.11-slim can be had (present locally or pullable): a plain `docker build`, torch from
#             PyTorch's CPU index.  This is every ordinary machine and GitHub Actions.
#   offline   no image registry answers (only package registries do): a Debian bookworm base is made with
#             debootstrap and imported as grader-base:bookworm (once; reused while it exists), torch comes
#             from a local wheel (TORCH_WHEEL, default /opt/wheels/torch-2.13.0+cpu-cp311-*.whl) and pip
#             trusts the host's CA bundle (HOST_CA_BUNDLE) during the build only.
#
# Other knobs: IMAGE (tag), BASE_IMAGE (registry mode), DEBIAN_MIRROR (offline mode), IMAGE_SOURCE (the
# repository URL, as the org.opencontainers.image.source label that links a ghcr.io package to its repository).
# Idempotent: re-running reuses the base image and Docker's layer cache.
set -euo pipefail

IMAGE=${IMAGE:-grader:local}
MODE=${GRADER_BUILD_MODE:-auto}
REGISTRY_BASE=${BASE_IMAGE:-python:3.11-slim}
OFFLINE_BASE=grader-base:bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
HOST_CA_BUNDLE=${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STAGE=$ROOT/build/docker   # the only part of build/ that .dockerignore lets into the context

say() { printf '[build-image] %s\n' "$*" >&2; }
die() { printf '[build-image] ERROR: %s\n' "$*" >&2; exit 1; }
run() { say "+ $*"; "$@"; }

command -v docker >/dev/null || die "no docker client on PATH (Debian: apt-get install -y docker.io)"
docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd, or check DOCKER_HOST / permissions)"

# Debian's docker.io has no buildx; a recent client then refuses BuildKit, so fall back to the legacy
# builder, which the Dockerfile is written for too.
if docker buildx version >/dev/null 2>&1; then
    export DOCKER_BUILDKIT=1
else
    export DOCKER_BUILDKIT=0
    say "no buildx plugin: using the legacy builder"
fi

if [[ $MODE == auto ]]; then
    if docker image inspect "$REGISTRY_BASE" >/dev/null 2>&1; then
        MODE=registry
    elif timeout 120 docker pull "$REGISTRY_BASE" >/dev/null 2>&1; then
        MODE=registry
    else
        MODE=offline
        say "cannot pull $REGISTRY_BASE: building offline from a debootstrap base"
    fi
fi
say "mode: $MODE, image: $IMAGE"

# Proxy settings of the host reach RUN steps as Docker's predefined build args (kept out of the image history).
proxy_args=()
for var in HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
    [[ -n ${!var:-} ]] && proxy_args+=(--build-arg "$var")
done

build_offline_base() {
    if docker image inspect "$OFFLINE_BASE" >/dev/null 2>&1; then
        say "base image $OFFLINE_BASE exists: reusing it (docker rmi $OFFLINE_BASE to rebuild)"
        return
    fi
    [[ $(id -u) == 0 ]] || die "debootstrap needs root to build $OFFLINE_BASE"
    if ! command -v debootstrap >/dev/null; then
        run apt-get install -y --no-install-recommends debootstrap || die "cannot install debootstrap"
    fi
    local dir
    dir=$(mktemp -d /var/tmp/grader-base.XXXXXX)
    # shellcheck disable=SC2064  # expand $dir now: it is local to this function
    trap "rm -rf '$dir'" EXIT
    run debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
        bookworm "$dir/rootfs" "$DEBIAN_MIRROR" || die "debootstrap failed (is $DEBIAN_MIRROR reachable?)"
    # apt lists and caches are dead weight in a base image.
    rm -rf "$dir"/rootfs/var/cache/apt/archives/*.deb "$dir"/rootfs/var/lib/apt/lists/*
    say "+ tar -C $dir/rootfs -c . | docker import - $OFFLINE_BASE"
    tar -C "$dir/rootfs" -c . | docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["/bin/bash"]' \
        -m "debootstrap --variant=minbase bookworm" - "$OFFLINE_BASE" >/dev/null
    rm -rf "$dir"
    trap - EXIT
}

stage_file() {  # hard link when possible: the torch wheel is large and the context is copied anyway
    local src=$1 dest=$2
    mkdir -p "$(dirname "$dest")"
    ln -f "$src" "$dest" 2>/dev/null || cp -f "$src" "$dest"
}

build_args=()
case $MODE in
    registry)
        build_args+=(--build-arg "BASE_IMAGE=$REGISTRY_BASE")
        ;;
    offline)
        build_offline_base
        wheel=${TORCH_WHEEL:-}
        if [[ -z $wheel ]]; then
            wheel=$(find /opt/wheels -maxdepth 1 -name "torch-2.13.0+cpu-cp311-*.whl" 2>/dev/null | head -n1 || true)
        fi
        [[ -n $wheel && -f $wheel ]] || die "no local CPU torch wheel for Python 3.11 (set TORCH_WHEEL=/path/to/torch-...-cp311-...whl)"
        version=$(basename "$wheel" | cut -d- -f2)   # e.g. 2.13.0+cpu
        rm -rf "$STAGE"
        trap 'rm -rf "$STAGE"' EXIT
        stage_file "$wheel" "$STAGE/wheels/$(basename "$wheel")"
        build_args+=(--build-arg "BASE_IMAGE=$OFFLINE_BASE"
                     --build-arg "TORCH_WHEEL_DIR=build/docker/wheels"
                     --build-arg "TORCH_SPEC=torch==$version")
        if [[ -f $HOST_CA_BUNDLE ]]; then
            stage_file "$HOST_CA_BUNDLE" "$STAGE/ca-bundle.crt"
            build_args+=(--build-arg "CA_BUNDLE=build/docker/ca-bundle.crt")
        fi
        ;;
    *)
        die "GRADER_BUILD_MODE must be auto, registry or offline (got $MODE)"
        ;;
esac

[[ -n ${IMAGE_SOURCE:-} ]] && build_args+=(--label "org.opencontainers.image.source=$IMAGE_SOURCE")

start=$SECONDS
run docker build -t "$IMAGE" "${build_args[@]}" "${proxy_args[@]}" -f "$ROOT/Dockerfile" "$ROOT"
say "built $IMAGE in $((SECONDS - start)) s"
run docker run --rm "$IMAGE" --version

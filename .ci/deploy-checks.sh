#!/usr/bin/env bash
# The deployment files: deploy/kubernetes/*.yaml validated offline with
# kubernetes-validate (strict, against pinned Kubernetes versions),
# deploy/compose.yml, the configuration files of both, and the Dockerfile,
# each against the others and the manual's Docker section
# (docs/src/how-to/docker-kubernetes.md; .ci/deploy-checks/check.py says what
# exactly). With Docker Compose installed, `docker compose config` checks
# compose.yml as well; with a Docker daemon, both image targets are built and
# the image's user and environment inspected. Fails on any finding.
#
#   bash .ci/deploy-checks.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

here=.ci/deploy-checks
venv="$(realpath -m "${DEPLOY_CHECKS_VENV:-target/deploy-checks-venv}")"
# The oldest Kubernetes the files are for (the budget's
# unhealthyPodEvictionPolicy is GA there), and the newest the pinned
# kubernetes-validate knows.
kubernetes_versions=(1.31.0 1.37.0)

log "deployment check tools (pinned)"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"

log "Kubernetes manifests, Compose file, configuration files, Dockerfile"
"$venv/bin/python" "$here/check.py" "${kubernetes_versions[@]}"

if docker compose version >/dev/null 2>&1; then
    log "docker compose config"
    docker compose -f deploy/compose.yml config --quiet
else
    echo "Docker Compose is not installed: compose.yml was checked as YAML only"
fi

if docker info >/dev/null 2>&1; then
    log "docker build (the service, then the simulators' target)"
    docker build --quiet -t changegate:deploy-checks . >/dev/null
    docker build --quiet --target sim -t changegate-sim:deploy-checks . >/dev/null
    # The Dockerfile's USER, which check.py compared with the manual and the
    # Kubernetes and Compose files.
    expected="$(awk '$1 == "USER" { user = $2 } END { print user }' Dockerfile)"
    user="$(docker image inspect -f '{{.Config.User}}' changegate:deploy-checks)"
    if [ "$user" != "$expected" ]; then
        echo "error: the image runs as '$user', not $expected (the Dockerfile's last USER)" >&2
        exit 1
    fi
    if docker run --rm --entrypoint sh changegate:deploy-checks -c 'command -v changegate-sim' >/dev/null; then
        echo "error: the service image contains the simulators" >&2
        exit 1
    fi
    docker run --rm changegate:deploy-checks --version
else
    echo "no Docker daemon: the image was not built (the Dockerfile was checked above)"
fi

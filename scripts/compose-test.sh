#!/usr/bin/env bash
# compose-test.sh: runs docker-compose.yml for real in podman containers and checks the product
# end to end from the host with kubectl only, then tears everything down (also on failure).
#
# Where no image can be pulled and there is no Docker daemon (these machines), it builds what the
# compose file needs: two Debian bases with mmdebstrap (a slim one for sluice: glibc, libstdc++,
# ca-certificates; one with wget for NATS's health check), the sluice image from binaries built on
# the host and stripped (Dockerfile target `prebuilt`), and a NATS image from the nats-server
# binary of scripts/install-nats.sh; then it points SLUICE_IMAGE / SLUICE_NATS_IMAGE at them and
# prints the sluice image's size. On a fresh
# Debian machine it installs podman, runc, podman-compose and mmdebstrap with apt (as root).
#
#   ./scripts/compose-test.sh
#
# Environment: CARGO_TARGET_DIR (release binaries are built there), SLUICE_BIN_DIR (use the six
# binaries in this directory instead of building), SLUICE_COMPOSE_STATE (work directory, default
# .compose: podman configuration, the base image tarball, image contexts, logs).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO="$(pwd)"

log() { echo "compose-test: $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

T0=$(date +%s.%N)
LAST=${T0}
TIMINGS=()
# Records the time since the previous step under a name.
step_done() {
    local now
    now=$(date +%s.%N)
    TIMINGS+=("$(awk -v a="${now}" -v b="${LAST}" -v n="$1" 'BEGIN { printf "%-44s %6.1f s", n, a - b }')")
    LAST=${now}
}
print_timings() {
    log "timings:"
    for line in "${TIMINGS[@]}"; do echo "  ${line}" >&2; done
    awk -v a="$(date +%s.%N)" -v b="${T0}" 'BEGIN { printf "  %-44s %6.1f s\n", "total", a - b }' >&2
}

# --- tools ---------------------------------------------------------------------------------
missing=()
for tool in podman runc podman-compose mmdebstrap; do
    command -v "${tool}" >/dev/null || missing+=("${tool}")
done
if ((${#missing[@]})); then
    [[ "$(id -u)" == 0 ]] || die "missing ${missing[*]}: run as root or: apt-get install -y podman runc podman-compose mmdebstrap"
    log "installing ${missing[*]} with apt-get"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y podman runc podman-compose mmdebstrap >&2
fi
command -v kubectl >/dev/null || die "kubectl not found on PATH: the end-to-end check runs it"
command -v cargo >/dev/null || [[ -n "${SLUICE_BIN_DIR:-}" ]] || die "cargo not found and no SLUICE_BIN_DIR"
step_done "tools"

# --- podman configuration (see the notes: runc and cgroupfs; no default ulimits) -----------------
STATE="${SLUICE_COMPOSE_STATE:-${REPO}/.compose}"
mkdir -p "${STATE}"
export CONTAINERS_CONF="${STATE}/containers.conf"
cat >"${CONTAINERS_CONF}" <<'EOF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF

# --- images -----------------------------------------------------------------------------------
BASE_IMAGE=localhost/sluice-compose-base:bookworm
if ! podman image exists "${BASE_IMAGE}"; then
    log "building ${BASE_IMAGE} with mmdebstrap (Debian bookworm from the machine's apt sources)"
    rm -f "${STATE}/base.tar"
    mmdebstrap --quiet --variant=apt --include=ca-certificates,wget bookworm "${STATE}/base.tar" >&2
    podman import --change 'CMD ["/bin/bash"]' "${STATE}/base.tar" "${BASE_IMAGE}" >/dev/null
    rm -f "${STATE}/base.tar"
fi
# The sluice image's base: Essential packages plus what the binaries link (libstdc++, libgcc),
# ca-certificates and passwd (the Dockerfile adds the runtime user); merged /usr without the
# usrmerge package (which pulls in perl); no documentation, locales or gconv modules.
RUNTIME_BASE_IMAGE=localhost/sluice-runtime-base:bookworm
if ! podman image exists "${RUNTIME_BASE_IMAGE}"; then
    log "building ${RUNTIME_BASE_IMAGE} with mmdebstrap (slim: Essential + libstdc++6 + ca-certificates)"
    rm -f "${STATE}/runtime-base.tar"
    mmdebstrap --quiet --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --include=libstdc++6,libgcc-s1,ca-certificates,passwd \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*' \
        bookworm "${STATE}/runtime-base.tar" >&2
    podman import --change 'CMD ["/bin/sh"]' "${STATE}/runtime-base.tar" "${RUNTIME_BASE_IMAGE}" >/dev/null
    rm -f "${STATE}/runtime-base.tar"
fi
step_done "base images (mmdebstrap, cached)"

BINARIES=(sluice sluice-watcher sluice-evaluator sluice-reporter sluice-renderer sluice-applier)
if [[ -z "${SLUICE_BIN_DIR:-}" ]]; then
    log "building the release binaries"
    cargo build --release --workspace --bins >&2
    SLUICE_BIN_DIR="${CARGO_TARGET_DIR:-${REPO}/target}/release"
fi
step_done "binaries (cargo build --release or SLUICE_BIN_DIR)"

VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
context="${STATE}/sluice-context"
rm -rf "${context}" && mkdir -p "${context}"
# symbols and debug information are of no use in the image (binutils' strip; copied as they are
# where it is missing)
for bin in "${BINARIES[@]}"; do
    [[ -x "${SLUICE_BIN_DIR}/${bin}" ]] || die "no binary ${SLUICE_BIN_DIR}/${bin}"
    if command -v strip >/dev/null; then
        strip --strip-all -o "${context}/${bin}" "${SLUICE_BIN_DIR}/${bin}"
    else
        cp "${SLUICE_BIN_DIR}/${bin}" "${context}/"
    fi
done
# OCI source and revision: the checkout's git remote (else its path) and commit
SOURCE_URL="$(git -C "${REPO}" config --get remote.origin.url 2>/dev/null || echo "file://${REPO}")"
REVISION="$(git -C "${REPO}" rev-parse HEAD 2>/dev/null || true)"
export SLUICE_IMAGE="localhost/sluice:compose-test"
podman build --quiet --target prebuilt -f Dockerfile \
    --build-arg RUNTIME_BASE="${RUNTIME_BASE_IMAGE}" --build-arg VERSION="${VERSION}" \
    --build-arg SOURCE_URL="${SOURCE_URL}" --build-arg REVISION="${REVISION}" \
    -t "${SLUICE_IMAGE}" "${context}" >/dev/null
image_mb="$(podman image inspect --format '{{.Size}}' "${SLUICE_IMAGE}" | awk '{ printf "%.0f", $1 / 1000000 }')"
binaries_mb="$(du -cm "${context}"/sluice* | tail -1 | cut -f1)"
log "sluice image ${SLUICE_IMAGE}: ${image_mb} MB (stripped binaries ${binaries_mb} MiB, from ${SLUICE_BIN_DIR})"
step_done "sluice image (prebuilt binaries)"

nats_server="$(scripts/install-nats.sh)"
nats_version="$("${nats_server}" --version | sed -n 's/^nats-server: v\{0,1\}\([0-9.]*\).*/\1/p')"
context="${STATE}/nats-context"
rm -rf "${context}" && mkdir -p "${context}"
cp "${nats_server}" "${context}/nats-server"
cat >"${context}/Containerfile" <<EOF
FROM ${BASE_IMAGE}
COPY nats-server /usr/local/bin/nats-server
EXPOSE 4222 8222
ENTRYPOINT ["/usr/local/bin/nats-server"]
EOF
export SLUICE_NATS_IMAGE="localhost/nats:${nats_version}-local"
podman build --quiet -f "${context}/Containerfile" -t "${SLUICE_NATS_IMAGE}" "${context}" >/dev/null
step_done "nats image (nats-server ${nats_version})"

# --- the stack ----------------------------------------------------------------------------------
# (nats-init issues the bus's credentials into the shared volume at the first start; the stack
# runs with NATS auth and TLS as k8s's prod overlay does)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export SLUICE_API_PORT SLUICE_NATS_PORT
SLUICE_API_PORT="$(free_port)"
SLUICE_NATS_PORT="$(free_port)"
PROJECT="sluicetest$$"
compose() { podman-compose --project-name "${PROJECT}" --file "${REPO}/docker-compose.yml" "$@"; }
container() { echo "${PROJECT}_$1_1"; }
SERVICES=(watcher evaluator reporter renderer applier)

teardown() {
    local status=$?
    trap - EXIT
    if ((status != 0)); then
        log "failed; container logs:"
        for name in nats-init nats testserver setup "${SERVICES[@]}"; do
            echo "===== ${name} =====" >&2
            podman logs --tail 40 "$(container "${name}")" >&2 2>&1 || true
        done
    fi
    log "tearing down (podman-compose down -v)"
    compose down -v >"${STATE}/down.log" 2>&1 || true
    # podman-compose 1.0.3 leaves the project's network behind (docker compose down removes it)
    podman network ls --filter "label=io.podman.compose.project=${PROJECT}" --format '{{.Name}}' \
        | xargs --no-run-if-empty podman network rm >>"${STATE}/down.log" 2>&1 || true
    local left
    left="$(podman ps -a --filter "label=io.podman.compose.project=${PROJECT}" --format '{{.Names}}')"
    left+="$(podman volume ls --filter "label=io.podman.compose.project=${PROJECT}" --format '{{.Name}}')"
    left+="$(podman network ls --filter "label=io.podman.compose.project=${PROJECT}" --format '{{.Name}}')"
    [[ -z "${left}" ]] || { log "left behind after down -v: ${left}"; status=1; }
    step_done "teardown (down -v)"
    print_timings
    if ((status == 0)); then log "PASS"; else log "FAIL (exit ${status})"; fi
    exit "${status}"
}
trap teardown EXIT

# (podman-compose 1.0.3 has no `config`; tests/e2e/tests/manifests.rs validates the file.)
log "starting the stack (project ${PROJECT}, API on 127.0.0.1:${SLUICE_API_PORT})"
# podman-compose 1.0.3 starts containers in dependency order without waiting for health or for
# setup to complete; the services restart (restart: unless-stopped) until setup's kubeconfigs exist.
compose up -d --no-build >"${STATE}/up.log" 2>&1 || { cat "${STATE}/up.log" >&2; die "podman-compose up"; }
step_done "podman-compose up -d"

setup_status="$(podman wait "$(container setup)")"
[[ "${setup_status}" == 0 ]] || die "setup exited ${setup_status}: $(podman logs "$(container setup)" 2>&1)"
step_done "setup job completed"

# Runs a container's compose health check until it passes (podman runs health checks only
# through systemd timers, absent here).
wait_healthy() {
    local name deadline
    name="$(container "$1")"
    deadline=$((SECONDS + 60))
    until podman healthcheck run "${name}" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "$1 not healthy within 60 s: $(podman logs --tail 20 "${name}" 2>&1)"
        sleep 0.5
    done
}
for name in nats testserver "${SERVICES[@]}"; do wait_healthy "${name}"; done
step_done "all health checks pass"
restarts=""
for name in "${SERVICES[@]}"; do
    restarts+=" ${name}=$(podman inspect --format '{{.RestartCount}}' "$(container "${name}")")"
done
log "service restarts while setup ran:${restarts}"

# --- end to end from the host, kubectl only -------------------------------------------------------
KUBECONFIG_HOST="${STATE}/host.kubeconfig"
# what `docker compose exec testserver cat /shared/host.kubeconfig` does (README)
podman exec "$(container testserver)" cat /shared/host.kubeconfig >"${KUBECONFIG_HOST}"
k() { kubectl --kubeconfig "${KUBECONFIG_HOST}" "$@"; }
TRIGGER=eventtrigger.lib.projectsveltos.io/eventtriggername=service-network-policy
CLUSTER=eventtrigger.lib.projectsveltos.io/clustername=cluster-a
RESOURCE=eventtrigger.lib.projectsveltos.io/resourcename

# Polls `kubectl get` until its output (names) is non-empty (want=some) or empty (want=none).
wait_get() {
    local want=$1 what=$2 deadline out
    shift 2
    deadline=$((SECONDS + 60))
    while true; do
        out="$(k "$@" -o name 2>&1)" || out="error: ${out}"
        if [[ "${out}" != error:* ]]; then
            if [[ "${want}" == some && -n "${out}" ]] || [[ "${want}" == none && -z "${out}" ]]; then
                log "${what}: ${out:-none left}"
                return 0
            fi
        fi
        ((SECONDS < deadline)) || die "${what}: still '${out}' after 60 s"
        sleep 0.2
    done
}

wait_get some "EventReport of seed 000 in mgmt" --context mgmt -n default get eventreports sveltos--sveltos-service--cluster-a
wait_get some "instantiated ConfigMap in mgmt" --context mgmt get configmaps -A -l "${TRIGGER},${CLUSTER},${RESOURCE}=my-service"
wait_get some "ClusterProfile for my-service" --context mgmt get clusterprofiles -l "${TRIGGER},${CLUSTER},${RESOURCE}=my-service"
step_done "setup's example converged (report, ConfigMap, profile)"

# The bus is secured (nats-init's files): the server's greeting demands TLS and authentication
# (so it refuses a client without an identity), and the tap identity, with its seed, client
# certificate and the CA, reads the pipeline over TLS.
SLUICE_CLI="${SLUICE_BIN_DIR}/sluice"
NATS_HOST_URL="nats://127.0.0.1:${SLUICE_NATS_PORT}"
greeting="$(python3 - "${SLUICE_NATS_PORT}" <<'PY'
import json, socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as s:
    line = s.makefile("rb").readline().decode()
info = json.loads(line.split(" ", 1)[1])
print(f"tls_required={info.get('tls_required', False)} auth_required={info.get('auth_required', False)} tls_verify={info.get('tls_verify', False)}")
PY
)"
[[ "${greeting}" == "tls_required=True auth_required=True tls_verify=True" ]] \
    || die "NATS does not demand TLS, client certificates and authentication: ${greeting}"
log "NATS demands ${greeting}"
AUTH="${STATE}/nats-auth"
rm -rf "${AUTH}"
podman cp "$(container nats-init):/shared/nats" "${AUTH}"
timeout 60 "${SLUICE_CLI}" tap 'sluice.v1.desired.>' --nats-url "${NATS_HOST_URL}" --count 1 \
    --nats-nkey-file "${AUTH}/tap.nk" --nats-ca-file "${AUTH}/nats-ca.crt" \
    --nats-cert-file "${AUTH}/tap.crt" --nats-key-file "${AUTH}/tap.key" >"${STATE}/tap.log" 2>&1 &
TAP_PID=$!
step_done "bus secured (TLS, auth; tap identity connects)"

k --context cluster-a apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Service
metadata:
  name: compose-test
  namespace: default
  labels:
    sveltos: fv
spec:
  selector:
    app: compose-test
  ports:
    - port: 8080
EOF
wait_get some "ClusterProfile for the new Service compose-test" --context mgmt get clusterprofiles -l "${TRIGGER},${CLUSTER},${RESOURCE}=compose-test"
step_done "Service created -> ClusterProfile"
wait "${TAP_PID}" || die "the tap identity did not read the desired state: $(cat "${STATE}/tap.log")"
log "the tap identity read $(grep -c . "${STATE}/tap.log") lines of the desired state over TLS"
rm -rf "${AUTH}"

k --context cluster-a -n default delete service compose-test >/dev/null
wait_get none "ClusterProfile for the deleted Service" --context mgmt get clusterprofiles -l "${TRIGGER},${CLUSTER},${RESOURCE}=compose-test"
wait_get none "ConfigMaps for the deleted Service" --context mgmt get configmaps -A -l "${TRIGGER},${CLUSTER},${RESOURCE}=compose-test"
wait_get some "ClusterProfile for my-service (untouched)" --context mgmt get clusterprofiles -l "${TRIGGER},${CLUSTER},${RESOURCE}=my-service"
step_done "Service deleted -> cleaned up"

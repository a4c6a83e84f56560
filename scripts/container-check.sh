#!/usr/bin/env bash
# Builds the Dockerfile with podman and runs the image, on a machine with no Docker engine and,
# if need be, no access to Docker Hub: when node:20-slim cannot be pulled, a local stand-in is
# made from Debian's mirror (debootstrap bookworm) and this machine's Node and npm. Then the image
# is started on the embedded database and, when they answer, on the local Postgres and Redis, and
# /health and `runguard status` are checked. Not run by CI. docs/deploy.md says what it proved.
#
#   sudo scripts/container-check.sh            # from the repository's root
#
# Settings (environment): PORT (default 18790; the daemon listens on the host's network),
# WORK (scratch folder, default /var/tmp/runguard-container-check), ISOLATION (buildah's RUN
# isolation, default chroot: no OCI runtime needed), DATABASE_URL_ADMIN (default
# postgres://postgres@127.0.0.1:5432/postgres), REDIS_URL (default redis://127.0.0.1:6379),
# STAND_IN=1 to make the stand-in base even when the real one could be pulled.
set -euo pipefail

PORT=${PORT:-18790}
WORK=${WORK:-/var/tmp/runguard-container-check}
ISOLATION=${ISOLATION:-chroot}
DATABASE_URL_ADMIN=${DATABASE_URL_ADMIN:-postgres://postgres@127.0.0.1:5432/postgres}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
BASE=docker.io/library/node:20-slim
IMAGE=localhost/runguard:check
CONTAINER=runguard-check-$$
# Postgres database and Redis key prefix of the second run, removed at the end.
CHECK_DB=runguard_container_check_$$
CHECK_PREFIX="runguard-container-check-$$:"

say() { printf '\n== %s\n' "$*"; }
fail() {
  printf 'container-check: %s\n' "$*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || fail 'run as root (podman and buildah keep their images in root storage here).'
[ -f Dockerfile ] && [ -f compose.yaml ] || fail 'run from the repository root (Dockerfile and compose.yaml).'
for tool in podman buildah node curl; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (apt-get install podman buildah)."
done
mkdir -p "$WORK"

# --- 1. the base image -------------------------------------------------------------------
make_stand_in() {
  command -v debootstrap >/dev/null || fail 'no base image and no debootstrap to make a stand-in (apt-get install debootstrap).'
  local root="$WORK/rootfs" node_bin npm_dir
  node_bin=$(command -v node)
  npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
  say "making a stand-in for $BASE: debootstrap bookworm (minbase) + $node_bin $(node -v) + npm from $npm_dir"
  rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 ||
    fail "debootstrap failed: see $WORK/debootstrap.log"
  # As the official image: Node in /usr/local, npm and npx beside it, user node (uid 1000).
  install -m 755 "$node_bin" "$root/usr/local/bin/node"
  mkdir -p "$root/usr/local/lib/node_modules"
  cp -a "$npm_dir" "$root/usr/local/lib/node_modules/npm"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
  chroot "$root" sh -c 'groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node'
  local changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    --change "ENV NODE_VERSION=$(node -v | tr -d v)" --change 'CMD ["node"]')
  # Where this machine reaches the npm registry through a TLS-inspecting proxy, its CA bundle is
  # needed by `npm ci` in the build; the official image has none, and needs none elsewhere.
  if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
    mkdir -p "$root/etc/ssl/certs"
    cp "$NODE_EXTRA_CA_CERTS" "$root/etc/ssl/certs/ca-certificates.crt"
    changes+=(--change 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt')
  fi
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root/root/.npm"
  tar -C "$root" -c . | podman import "${changes[@]}" \
    --message 'stand-in for node:20-slim (scripts/container-check.sh)' - "$BASE" >/dev/null
}

if [ "${STAND_IN:-0}" = 1 ]; then
  make_stand_in
elif podman image exists "$BASE"; then
  say "base image $BASE is present: $(podman image inspect --format '{{.Comment}}' "$BASE" 2>/dev/null || true)"
elif timeout 60 podman pull -q "$BASE" >/dev/null 2>&1; then
  say "pulled $BASE"
else
  make_stand_in
fi

# --- 2. the build ------------------------------------------------------------------------
say "podman build (isolation $ISOLATION, docker format for the HEALTHCHECK)"
start=$(date +%s)
podman build --pull=never --isolation "$ISOLATION" --network host --format docker -t "$IMAGE" . >"$WORK/build.log" 2>&1 ||
  fail "build failed: see $WORK/build.log"
echo "built $IMAGE in $(($(date +%s) - start)) s: $(podman image inspect --format '{{.Size}}' "$IMAGE") bytes"

# --- 3. run it ---------------------------------------------------------------------------
# podman run needs an OCI runtime that may not work in a sandboxed machine (crun refused to set
# rlimits here); buildah's chroot isolation runs the same image without one, with the image's
# entrypoint and environment, but ignores its HEALTHCHECK and bind mounts.
mapfile -t ENTRYPOINT < <(podman image inspect --format '{{json .Config.Entrypoint}}' "$IMAGE" |
  node -e 'for (const arg of JSON.parse(require("fs").readFileSync(0, "utf8"))) console.log(arg)')
DAEMON_PID=
RUNNER=
# The daemon's environment: `buildah run` starts each command afresh, so in_container passes it too.
ENV_ARGS=()
cleanup() {
  if [ "$RUNNER" = podman ]; then
    podman rm -f -v "$CONTAINER" >/dev/null 2>&1 || true
  elif [ "$RUNNER" = buildah ]; then
    [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
    buildah rm "$CONTAINER" >/dev/null 2>&1 || true
  fi
  psql "$DATABASE_URL_ADMIN" -qc "DROP DATABASE IF EXISTS $CHECK_DB WITH (FORCE)" >/dev/null 2>&1 || true
  command -v redis-cli >/dev/null && redis-cli -u "$REDIS_URL" --scan --pattern "$CHECK_PREFIX*" |
    xargs -r redis-cli -u "$REDIS_URL" del >/dev/null 2>&1 || true
}
trap cleanup EXIT

# in_container <command...>: runs a command in the running container, with the daemon's environment.
in_container() {
  if [ "$RUNNER" = podman ]; then podman exec "$CONTAINER" "$@"; else
    buildah run --isolation chroot --network host "${ENV_ARGS[@]}" "$CONTAINER" -- "$@"
  fi
}

# start_daemon <log> <env...>: the image's entrypoint and CMD, on the host's network.
start_daemon() {
  local log=$1
  shift
  ENV_ARGS=()
  for pair in "$@"; do ENV_ARGS+=(-e "$pair"); done
  if [ -z "$RUNNER" ]; then
    if podman run -d --name "$CONTAINER" --network host "${ENV_ARGS[@]}" "$IMAGE" >/dev/null 2>"$WORK/podman-run.log"; then
      RUNNER=podman
    else
      echo "podman run failed ($(tail -1 "$WORK/podman-run.log")); running the image with buildah (chroot isolation)"
      podman rm -f -v "$CONTAINER" >/dev/null 2>&1 || true
      RUNNER=buildah
      buildah from --pull-never --name "$CONTAINER" "$IMAGE" >/dev/null
    fi
  elif [ "$RUNNER" = podman ]; then
    podman rm -f -v "$CONTAINER" >/dev/null
    podman run -d --name "$CONTAINER" --network host "${ENV_ARGS[@]}" "$IMAGE" >/dev/null
  fi
  if [ "$RUNNER" = podman ]; then
    (podman logs -f "$CONTAINER" >"$log" 2>&1 &)
  else
    buildah run --isolation chroot --network host "${ENV_ARGS[@]}" "$CONTAINER" -- "${ENTRYPOINT[@]}" start >"$log" 2>&1 &
    DAEMON_PID=$!
  fi
  for _ in $(seq 1 60); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0
    sleep 1
  done
  tail -20 "$log"
  fail "the daemon did not answer /health on port $PORT within 60 s (log: $log)"
}

stop_daemon() {
  if [ "$RUNNER" = podman ]; then
    podman stop -t 10 "$CONTAINER" >/dev/null
  else
    kill "$DAEMON_PID"
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=
  fi
}

check_daemon() {
  echo "GET /health: $(curl -s "http://127.0.0.1:$PORT/health")"
  if [ "$RUNNER" = podman ]; then
    podman healthcheck run "$CONTAINER" || fail 'the HEALTHCHECK failed'
    echo 'HEALTHCHECK: healthy'
  else
    # The image's HEALTHCHECK command, run by hand (buildah does not run health checks).
    local check
    check=$(podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$IMAGE" |
      node -e 'const test = JSON.parse(require("fs").readFileSync(0, "utf8")); console.log(test[0] === "CMD" ? test[3] : "")')
    [ -n "$check" ] || fail 'the image has no HEALTHCHECK of the form CMD node -e <script> (built without --format docker?)'
    in_container node -e "$check" || fail 'the HEALTHCHECK command failed'
    echo 'HEALTHCHECK command: exit 0'
  fi
  echo '$ runguard status (in the container)'
  in_container runguard status || fail 'runguard status failed in the container'
  local key
  key=$(in_container cat /data/api-key | tr -d '\n')
  local answer
  answer=$(curl -s -X POST "http://127.0.0.1:$PORT/v1/runs" -H "Authorization: Bearer $key" \
    -H 'content-type: application/json' -d '{"user_id":"container-check"}')
  echo "POST /v1/runs: $answer"
  case $answer in *'"status":"RUNNING"'*) ;; *) fail 'the run did not start' ;; esac
}

say "run 1: embedded database (no DATABASE_URL), HOST as the image sets it (0.0.0.0), port $PORT"
start_daemon "$WORK/daemon-embedded.log" "PORT=$PORT"
check_daemon
stop_daemon

if psql "$DATABASE_URL_ADMIN" -qc "CREATE DATABASE $CHECK_DB" >/dev/null 2>&1; then
  say "run 2: Postgres ($CHECK_DB) and Redis ($REDIS_URL, prefix $CHECK_PREFIX), as compose.yaml sets them"
  database_url="${DATABASE_URL_ADMIN%/*}/$CHECK_DB"
  start_daemon "$WORK/daemon-postgres.log" "PORT=$PORT" "DATABASE_URL=$database_url" "REDIS_URL=$REDIS_URL" \
    "RUNGUARD_REDIS_KEY_PREFIX=$CHECK_PREFIX" RUNGUARD_DEFAULT_PLAN=scale
  check_daemon
  stop_daemon
else
  say 'run 2 skipped: no Postgres answers at DATABASE_URL_ADMIN'
fi

say 'compose.yaml as podman-compose reads it (dry run: it needs postgres:16 and redis:7 from a registry)'
if command -v podman-compose >/dev/null; then
  podman-compose --dry-run -p runguard-check -f compose.yaml up -d 2>&1 | grep -E '^podman (run|build)' || true
  # podman-compose 1.0.3 creates the volumes and the network even in a dry run.
  podman volume rm runguard-check_postgres-data runguard-check_runguard-data >/dev/null 2>&1 || true
  podman network rm runguard-check_default >/dev/null 2>&1 || true
else
  echo 'podman-compose is not installed (apt-get install podman-compose)'
fi
say 'done'

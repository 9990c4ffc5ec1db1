# shellcheck shell=bash disable=SC2034  # variables are used by the scripts sourcing this
# Shared paths and helpers for scripts/rig/setup.sh and scripts/rig/teardown.sh.
# Sourced, never executed.

RIG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RIG_DEPLOY="$RIG_ROOT/deploy/rig"
RIG_STATE=/var/lib/installer-rig          # registry storage, caches (kept by teardown)
RIG_CACHE="$RIG_STATE/cache"              # rootfs tarball, node package, trixie apt lists
RIG_LOG=/var/log/installer-rig            # dockerd.log, registry.log, build-*.log
RIG_RUN=/run/installer-rig                # pid files of the daemons this rig started
RIG_REGISTRY_ADDR=127.0.0.1:5000
DOCKER_SOCK=/var/run/docker.sock

export DEBIAN_FRONTEND=noninteractive

log() { printf '==> %s\n' "$*"; }
warn() { printf 'rig: warning: %s\n' "$*" >&2; }
die() { printf 'rig: error: %s\n' "$*" >&2; exit 1; }

# pid_alive PIDFILE: true if the pid file names a live process.
pid_alive() {
  local pid
  [[ -s $1 ]] || return 1
  pid="$(<"$1")"
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

docker_up() { docker info >/dev/null 2>&1; }
registry_up() { curl -fsS -o /dev/null --max-time 2 "http://$RIG_REGISTRY_ADDR/v2/" 2>/dev/null; }

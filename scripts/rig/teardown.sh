#!/usr/bin/env bash
# Stops what scripts/rig/setup.sh started: the registry and the Docker engine (only
# if setup.sh started them: their pid files are in /run/installer-rig), and unmounts
# the nsfs mounts a stopped dockerd leaves under /var/run/docker/netns.
# Images, containers' data, the registry's storage and the caches are kept, so the
# next setup.sh is fast; --purge also removes the installer-rig/* and
# 127.0.0.1:5000/* images and /var/lib/installer-rig (registry data, rootfs and
# node caches). Debian packages are never removed.
#
# Usage: scripts/rig/teardown.sh [--purge]
set -euo pipefail

# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PURGE=0
for arg in "$@"; do
  case "$arg" in
    --purge) PURGE=1 ;;
    -h | --help) sed -n '2,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: $arg (try --help)" ;;
  esac
done

[[ $(id -u) == 0 ]] || die "must run as root"

# stop_pidfile NAME PIDFILE TIMEOUT_S: SIGTERM, wait, then SIGKILL.
stop_pidfile() {
  local name="$1" pidfile="$2" timeout="$3" pid i
  if ! pid_alive "$pidfile"; then
    rm -f "$pidfile"
    return 0
  fi
  pid="$(<"$pidfile")"
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || :
  for ((i = 0; i < timeout * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    warn "$name did not stop within ${timeout} s; killing it"
    kill -KILL "$pid" 2>/dev/null || :
    sleep 0.5
  fi
  rm -f "$pidfile"
}

if ((PURGE)) && docker_up; then
  mapfile -t imgs < <(docker image ls --format '{{.Repository}}:{{.Tag}}' |
    grep -E "^(installer-rig/|$RIG_REGISTRY_ADDR/)" || :)
  if ((${#imgs[@]})); then
    log "removing ${#imgs[@]} rig image(s)"
    docker image rm -f "${imgs[@]}" >/dev/null || warn "some images could not be removed (in use?)"
  fi
fi

stop_pidfile docker-registry "$RIG_RUN/registry.pid" 5

if [[ -s $RIG_RUN/dockerd.pid ]]; then
  # dockerd stops its containers (10 s timeout each, in parallel) and its containerd.
  stop_pidfile dockerd "$RIG_RUN/dockerd.pid" 30
elif docker_up; then
  log "leaving the running Docker engine alone: scripts/rig/setup.sh did not start it"
fi

# A stopped dockerd leaves nsfs mounts of its network namespaces behind.
if ! pid_alive /var/run/docker.pid; then
  while read -r m; do
    log "unmounting leftover nsfs $m"
    umount "$m" 2>/dev/null || umount -l "$m" || warn "could not unmount $m"
  done < <(findmnt -rn -t nsfs -o TARGET | grep -E '^(/var)?/run/docker/netns/' || :)
fi

if ((PURGE)); then
  log "removing $RIG_STATE"
  rm -rf --one-file-system "$RIG_STATE"
fi
if ((PURGE)); then echo "rig down (purged)"; else echo "rig down"; fi

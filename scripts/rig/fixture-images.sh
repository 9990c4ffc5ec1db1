# Sourced by scripts/rig/setup.sh (it defines the IMG_* names, REBUILD, TRIXIE_DEBS and the helpers
# log, make_tmp, docker_build, check_libc_only and install_from_trixie these functions use): the
# rig's images that carry the machine's own engine binaries or packages. Each carries a hash of what
# it copies as a label, and is rebuilt when that changes, not only when it is missing.
# shellcheck shell=bash

# The hash of files copied into an image, for its label: the image is rebuilt when they change
# (a package update replaces the docker CLI, say), not only when it is missing.
files_sum() { cat "$@" | sha256sum | cut -c1-16; }
label_is() { [[ $(docker image inspect -f '{{index .Config.Labels "installer-rig.context"}}' "$1" 2>/dev/null) == "$2" ]]; }

build_docker_cli() {
  local ctx sum old
  sum="$(files_sum "$RIG_DEPLOY/docker-cli/Dockerfile" /usr/bin/docker "$COMPOSE_PLUGIN")"
  ((!REBUILD)) && label_is "$IMG_DOCKER_CLI" "$sum" && return 0
  old="$(docker image inspect -f '{{.Id}}' "$IMG_DOCKER_CLI" 2>/dev/null || :)"
  make_tmp ctx
  cp "$RIG_DEPLOY/docker-cli/Dockerfile" "$ctx/"
  check_libc_only /usr/bin/docker
  check_libc_only "$COMPOSE_PLUGIN"
  cp /usr/bin/docker "$ctx/docker"
  cp "$COMPOSE_PLUGIN" "$ctx/docker-compose"
  docker_build "$IMG_DOCKER_CLI" "$ctx" --network none --label "installer-rig.context=$sum"
  [[ -z $old ]] || docker image rm "$old" >/dev/null 2>&1 || :
}

# A stand-in for the legacy host that scripts/migrate-host.sh retires: systemd as
# PID 1 with dummy units (docs/rig.md). The image is the test fixture, so it is
# rebuilt when a file of deploy/rig/systemd-host or the docker CLI it holds changes
# (their hash is a label of the image), not only when it is missing.
build_systemd_host() {
  local src="$RIG_DEPLOY/systemd-host" sum ctx old
  sum="$(cd "$src" && find . -type f -print0 | sort -z | xargs -0 sha256sum | cat - /usr/bin/docker | sha256sum | cut -c1-16)"
  ((!REBUILD)) && label_is "$IMG_SYSTEMD_HOST" "$sum" && return 0
  old="$(docker image inspect -f '{{.Id}}' "$IMG_SYSTEMD_HOST" 2>/dev/null || :)"
  make_tmp ctx
  cp -a "$src/." "$ctx/"
  check_libc_only /usr/bin/docker
  cp /usr/bin/docker "$ctx/docker"
  docker_build "$IMG_SYSTEMD_HOST" "$ctx" --network host --label "installer-rig.context=$sum"
  # The replaced fixture image is of no further use (kept if a container still runs it).
  if [[ -n $old && $old != "$(docker image inspect -f '{{.Id}}' "$IMG_SYSTEMD_HOST")" ]]; then
    docker image rm "$old" >/dev/null 2>&1 || :
  fi
}

# The worker engines of the rig's multi-node Swarm (test/helpers/e2e/swarm-rig.ts): the base
# with the engine packages the machine runs, rebuilt when those packages or the context change.
build_swarm_node() {
  local src="$RIG_DEPLOY/swarm-node" sum ctx old pkg ver
  for pkg in docker.io containerd docker-cli; do
    ver="$(dpkg-query -W -f='${Version}' "$pkg")"
    # The kept .deb must be the installed version (a machine set up before they were kept has none).
    if ! compgen -G "$TRIXIE_DEBS/${pkg}_${ver//:/%3a}_*.deb" >/dev/null; then
      log "fetching $pkg $ver from Debian trixie for the Swarm's worker image"
      DOWNLOAD_ONLY=1 install_from_trixie "$pkg"
    fi
  done
  sum="$(files_sum "$src/Dockerfile" "$src/entry.sh" "$TRIXIE_DEBS"/docker.io_*.deb "$TRIXIE_DEBS"/containerd_*.deb "$TRIXIE_DEBS"/docker-cli_*.deb)"
  ((!REBUILD)) && label_is "$IMG_SWARM_NODE" "$sum" && return 0
  old="$(docker image inspect -f '{{.Id}}' "$IMG_SWARM_NODE" 2>/dev/null || :)"
  make_tmp ctx
  cp -a "$src/." "$ctx/"
  cp "$TRIXIE_DEBS"/docker.io_*.deb "$TRIXIE_DEBS"/containerd_*.deb "$TRIXIE_DEBS"/docker-cli_*.deb "$ctx/"
  docker_build "$IMG_SWARM_NODE" "$ctx" --network host --label "installer-rig.context=$sum"
  if [[ -n $old && $old != "$(docker image inspect -f '{{.Id}}' "$IMG_SWARM_NODE")" ]]; then
    docker image rm "$old" >/dev/null 2>&1 || :
  fi
}


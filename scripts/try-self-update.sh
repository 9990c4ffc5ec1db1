#!/usr/bin/env bash
# Try a real self-update on this machine, as a customer's host would run one.
#   bash scripts/try-self-update.sh            deploy the packaged stack, publish a newer build
#   bash scripts/try-self-update.sh --broken   publish a build that never becomes healthy (a rollback)
#   bash scripts/try-self-update.sh --down     remove the stack, its volumes and its images
# The stack is deploy/docker-compose.yml with a .env made from deploy/.env.example, on the local
# engine and registry that scripts/rig/setup.sh sets up, with images built by scripts/build-image.sh
# and pushed to 127.0.0.1:5000/try/installer. The first run deploys; every run publishes a new
# build as prod-latest, which the UI then offers as `Manager update available`.
# Settings (environment): TRY_DIR (the stack's work dir, default /var/tmp/installer-try),
# TRY_PORT (HTTPS, default 9443) and TRY_HTTP_PORT (plain HTTP on loopback, default 9080).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
work=${TRY_DIR:-/var/tmp/installer-try}
port=${TRY_PORT:-9443}
http_port=${TRY_HTTP_PORT:-9080}
registry=127.0.0.1:5000/try
repo=$registry/installer
fixtures=$root/test/fixtures/self-update
mode=newer
case "${1:-}" in
  '') ;;
  --broken) mode=broken ;;
  --down) mode=down ;;
  -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
  *) echo "try-self-update: unknown argument $1 (try --help)" >&2; exit 2 ;;
esac

say() { printf '==> %s\n' "$*"; }
compose() { docker compose -f "$work/docker-compose.yml" "$@"; }

if [ "$mode" = down ]; then
  if [ -f "$work/docker-compose.yml" ]; then compose down -v --remove-orphans -t 5 || true; fi
  docker rm -f installer-self-updater >/dev/null 2>&1 || true
  docker image ls --format '{{.Repository}}:{{.Tag}}' | grep "^$repo:" | xargs -r docker rmi -f >/dev/null || true
  rm -rf "$work"
  say "removed the stack in $work and the images $repo:*"
  exit 0
fi

bash "$root/scripts/ensure-deps.sh"
bash "$root/scripts/rig/setup.sh" >/dev/null

# The installer as its image ships, built and pushed as base on the first run (--down removes it).
base_ref=$repo:base
if ! docker image inspect "$base_ref" >/dev/null 2>&1; then
  say "building the installer image $base_ref (scripts/build-image.sh)"
  bash "$root/scripts/build-image.sh" --rig --push "$base_ref" | grep '^digest ' || true
fi

if ! docker inspect installer-backend >/dev/null 2>&1; then
  say "deploying deploy/docker-compose.yml in $work"
  mkdir -p "$work"
  docker tag "$base_ref" "$repo:prod-latest"
  docker push -q "$repo:prod-latest" >/dev/null
  cp "$root/deploy/docker-compose.yml" "$work/docker-compose.yml"
  # deploy/.env.example, changed only where this machine differs from a customer's host.
  sed -e "s|^INSTALLER_REGISTRY=.*|INSTALLER_REGISTRY=$registry|" \
      -e "s|^DATABASE_PASSWORD=.*|DATABASE_PASSWORD=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')|" \
      -e "s|^INSTALLER_BIND=.*|INSTALLER_BIND=127.0.0.1|" \
      -e "s|^INSTALLER_PORT=.*|INSTALLER_PORT=$port|" \
      -e "s|^#INSTALLER_HTTP_PORT=.*|INSTALLER_HTTP_PORT=$http_port|" \
      -e "s|^INSTALLER_WORK_DIR=.*|INSTALLER_WORK_DIR=$work|" \
      -e "s|^#POSTGRES_IMAGE=.*|POSTGRES_IMAGE=installer-rig/postgres:15|" \
      "$root/deploy/.env.example" >"$work/.env"
  chmod 600 "$work/.env"
  (cd "$work" && docker compose up -d --wait --wait-timeout 180 backend)
fi

# A new build: the base with a label of its own (so a digest of its own); --broken adds a
# healthcheck that never passes, so the helper rolls back.
n=$(date +%s)
if [ "$mode" = broken ]; then dockerfile=unhealthy.Dockerfile tag=broken-$n; else dockerfile=good.Dockerfile tag=newer-$n; fi
say "publishing $repo:$tag as prod-latest ($([ "$mode" = broken ] && echo 'never becomes healthy' || echo 'a working build'))"
DOCKER_BUILDKIT=0 docker build -q -f "$fixtures/$dockerfile" --build-arg "BASE=$base_ref" --build-arg "VARIANT=try-$tag" -t "$repo:$tag" "$fixtures" >/dev/null
docker tag "$repo:$tag" "$repo:prod-latest"
docker push -q "$repo:prod-latest" >/dev/null
# As on a customer's host, only the registry has the new build: the local channel tag goes back to
# the build that runs, and the update pulls the new one.
docker tag "$(docker inspect --format '{{.Image}}' installer-backend)" "$repo:prod-latest"
docker rmi "$repo:$tag" >/dev/null

password_file=/var/lib/installer/secrets/initial-admin-password
cat <<EOF

The installer runs the packaged stack in $work (it now offers the build just published).
  UI:        http://127.0.0.1:$http_port   (HTTPS: https://127.0.0.1:$port, self-signed)
  user:      admin
  password:  docker exec installer-backend cat $password_file   (the UI asks for a new one)
Open (or reload) the page: the header shows \`Manager update available\`; click it, then \`Update now\`.
Run again with --broken to publish a build that fails its healthcheck and see a real rollback;
--down removes everything.
EOF

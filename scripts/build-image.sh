#!/usr/bin/env bash
# Builds the installer image from deploy/Dockerfile.
#   scripts/build-image.sh [--rig] [--push] [--context-only DIR] TAG [TAG...]
# The context holds compiled code, the built UI, production dependencies and the compose files of both
# channels (deploy/), prepared here, so the Dockerfile
# itself compiles and downloads nothing. --rig builds from the locally made base images of the
# test rig (no registry pulls); --push pushes every tag and prints `digest <tag> <sha256:…>`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rig=0 push=0 context_only=
tags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rig) rig=1 ;;
    --push) push=1 ;;
    --context-only) context_only=$2; shift ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    -*) echo "Unknown option: $1 (try --help)" >&2; exit 2 ;;
    *) tags+=("$1") ;;
  esac
  shift
done
if [ -z "$context_only" ] && [ ${#tags[@]} -eq 0 ]; then
  echo "build-image: name at least one tag (try --help)" >&2
  exit 2
fi

cache=${INSTALLER_BUILD_CACHE:-$root/.artifacts/image-build}
ctx=${context_only:-$cache/context}
mkdir -p "$cache"
# One build at a time per cache: a second build (another test, CI beside a developer) waits here
# instead of deleting the context the first one is sending to the daemon.
exec 9>"$cache/.lock"
flock 9

# Production dependencies are installed once per lockfile and reused.
lock_hash=$(sha256sum "$root/package-lock.json" | cut -c1-16)
deps="$cache/deps-$lock_hash"
if [ ! -d "$deps/node_modules" ]; then
  rm -rf "$cache"/deps-*
  mkdir -p "$deps"
  cp "$root/package.json" "$root/package-lock.json" "$deps/"
  (cd "$deps" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
fi

# What the context is made from, by content: a context made from the same sources is not made
# again (compiling, bundling and building the UI take most of a build), here or by the next build.
sources_hash=$(cd "$root" && find tsconfig.json tsconfig.build.json package.json package-lock.json src machines controllers migrations scripts deploy \
  -type f ! -path 'src/ui/dist/*' ! -path '*/node_modules/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-32)
made=0
if [ -z "$context_only" ] && [ -d "$ctx/dist" ] && [ "$(cat "$cache/context.sources" 2>/dev/null)" = "$sources_hash" ]; then made=1; fi
rm -f "$cache/context.sources"
if [ "$made" = 1 ]; then echo "context: reused (sources $sources_hash)"; else echo "context: made (sources $sources_hash)"; fi

if [ "$made" = 0 ]; then
# A fresh output each build: a file whose source was removed (a module, a migration) must not ship.
rm -rf "$cache/dist"
(cd "$root" && npx tsc -p tsconfig.build.json --outDir "$cache/dist")
# The backend as one script (run by the image's CMD), beside the compiled files that the CLIs, the
# healthcheck and the migrations still load one by one.
(cd "$root" && node --import tsx scripts/bundle-backend.ts "$cache/dist")
# The operator UI (Vite); the backend serves it from dist/src/ui/dist, beside dist/src/api (src/api/ui.ts).
(cd "$root" && npx vite build src/ui --outDir "$cache/ui" --emptyOutDir)

rm -rf "$ctx"
mkdir -p "$ctx/scripts"
cp -a "$deps/node_modules" "$ctx/node_modules"
cp -a "$cache/dist" "$ctx/dist"
mkdir -p "$ctx/dist/src/ui"
cp -a "$cache/ui" "$ctx/dist/src/ui/dist"
cp "$root/package.json" "$ctx/"
find "$root/scripts" -maxdepth 1 -name '*.sh' -exec cp {} "$ctx/scripts/" \;
# The compose files this build publishes, one per channel, at a fixed path in the image
# (/usr/src/app/deploy): without PUBLISHED_COMPOSE_URL a self-update installs the one its target ships.
mkdir -p "$ctx/deploy"
cp "$root/deploy/docker-compose.yml" "$root/deploy/docker-compose.dev.yml" "$ctx/deploy/"
cat > "$ctx/.dockerignore" <<'IGNORE'
.dockerignore
IGNORE
fi
[ -n "$context_only" ] && { echo "context ready: $ctx"; exit 0; }
echo "$sources_hash" >"$cache/context.sources"

args=()
if [ "$rig" = 1 ]; then
  args+=(--build-arg NODE_IMAGE=installer-rig/node:24 --build-arg DOCKER_CLI_IMAGE=installer-rig/docker-cli:latest)
fi
# What the build declares (docs/adr/0054-preflight-report.md): its version (package.json's, with the
# sources' hash, so two builds of other sources never share one), and the oldest engine API it runs
# on, read from the one place that declares it.
version=$(node -p "require('$root/package.json').version")
engine_min=$(sed -n "s/^export const MIN_ENGINE_API = '\([0-9.]*\)';.*/\1/p" "$root/src/adapters/engine-version.ts")
[ -n "$engine_min" ] || { echo "build-image: MIN_ENGINE_API not found in src/adapters/engine-version.ts" >&2; exit 1; }
args+=(--label "org.opencontainers.image.version=$version+${sources_hash:0:12}" --label "io.installer.engine-api-min=$engine_min")
tag_args=()
for t in "${tags[@]}"; do tag_args+=(-t "$t"); done
# The legacy builder: it needs no buildx plugin and never pulls a base that exists locally.
if ! DOCKER_BUILDKIT=0 docker build -q -f "$root/deploy/Dockerfile" "${args[@]}" "${tag_args[@]}" "$ctx" >"$cache/build.log" 2>&1; then
  cat "$cache/build.log" >&2
  exit 1
fi

if [ "$push" = 1 ]; then
  for t in "${tags[@]}"; do
    docker push -q "$t" >/dev/null
    digest=$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$t" | grep -F "${t%:*}@" | head -n1 | sed 's/.*@//')
    echo "digest $t $digest"
  done
fi
echo "built ${tags[*]}"

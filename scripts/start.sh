#!/usr/bin/env bash
# Starts the installer on embedded defaults: PGlite in ./data, the local Docker engine (set up when
# absent) and a small demo platform of local images for it to manage. Ctrl-C stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/ensure-deps.sh
bash scripts/rig/setup.sh
platform_dir="$root/data/platform"
mkdir -p "$platform_dir"
cp deploy/rig/demo-platform/docker-compose.yml "$platform_dir/docker-compose.yml"
[ -f "$platform_dir/.env" ] || cp deploy/rig/demo-platform/.env.template "$platform_dir/.env"
docker compose -p platform -f "$platform_dir/docker-compose.yml" up -d --wait --wait-timeout 120
export NODE_ENV=${NODE_ENV:-development} DATA_DIR=${DATA_DIR:-$root/data} PLATFORM_DIR=${PLATFORM_DIR:-$platform_dir}
export HOST=${HOST:-127.0.0.1} PORT=${PORT:-8080}
echo "installer: http://$HOST:$PORT  (API docs at /api/docs; first admin password in $DATA_DIR/secrets/initial-admin-password; you choose your own at first sign-in)"
exec npm start

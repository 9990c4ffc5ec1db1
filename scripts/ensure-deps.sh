#!/usr/bin/env bash
# Installs the project's npm packages (Node.js 24 among them) when they are missing or stale.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
stamp=node_modules/.installed-lock
if [ ! -x node_modules/.bin/node ] || [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi

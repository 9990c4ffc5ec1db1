#!/usr/bin/env bash
# The whole test suite on a fresh machine: packages, the real Docker rig, then typecheck, lint and
# every test tier (unit, API on the machine's Postgres, e2e on the real engine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/ensure-deps.sh
bash scripts/rig/setup.sh
exec npm test

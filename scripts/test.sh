#!/usr/bin/env bash
# The whole test suite on a fresh machine: packages, the real Docker rig, then typecheck, lint and
# every test tier (unit, API on the machine's Postgres, e2e on the real engine), then the previous
# build's API smoke tests on today's schema (docs/adr/0045-migrations-checked-for-the-old-build.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/ensure-deps.sh
bash scripts/rig/setup.sh
npm test
exec bash scripts/previous-build-smoke.sh

#!/usr/bin/env bash
# The whole test suite on a fresh machine: packages, the real Docker rig, then typecheck, lint and
# every test tier (unit, API on the machine's Postgres, e2e on the real engine). The previous build's
# API smoke tests on today's schema run first (docs/adr/0045-migrations-checked-for-the-old-build.md):
# they are quick, and the suite's own `N passed, N failed` stays the run's last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/ensure-deps.sh
bash scripts/rig/setup.sh
bash scripts/previous-build-smoke.sh
exec npm test

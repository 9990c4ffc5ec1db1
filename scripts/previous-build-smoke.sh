#!/usr/bin/env bash
# The previous build's API smoke tests on today's schema (docs/adr/0045-migrations-checked-for-the-old-build.md).
# During a self-update the old backend serves on the schema the new image's init migrated; this
# checks out the previous build into a temporary worktree, gives it today's migrations (a fresh
# database per test file is migrated with them) and runs a few of ITS API test files.
#
#   bash scripts/previous-build-smoke.sh            the previous build: the commit before the newest migration was added
#   PREVIOUS_BUILD=<rev> bash scripts/...           another one (a release tag)
#
# The previous build is the parent of the commit that added the newest migration; when that
# migration is not committed yet, HEAD. Its migrations must be a prefix of today's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Files of the old build's API tests that write and read its main tables: users and sign-ins, jobs
# and the audit trail, the update policy and quarantine, webhooks and their outbox.
SMOKE=(users.test.ts deployment-api.test.ts update-policy.test.ts notifications.test.ts)

newest=
for m in migrations/[0-9][0-9][0-9][0-9]_*.ts; do newest=${m#migrations/}; done
if [ -n "${PREVIOUS_BUILD:-}" ]; then
  prev=$(git rev-parse --verify "$PREVIOUS_BUILD^{commit}")
else
  added=$(git log --diff-filter=A --format=%H -1 -- "migrations/$newest")
  if [ -z "$added" ]; then prev=$(git rev-parse HEAD); else prev=$(git rev-parse "$added^"); fi
fi

# Its migrations must be a subset of today's. A migration renamed before it was ever released (a
# number given again so that it sorts after the others) makes the builds between not previous ones
# of anything that shipped: walk back to the newest ancestor whose migrations today's all keep.
missing_of() {
  git ls-tree --name-only "$1" migrations/ | sed 's#^migrations/##' | grep -E '^[0-9]{4}_[a-z0-9_]+\.ts$' | while read -r m; do
    [ -f "migrations/$m" ] || echo "$m"
  done
}
start=$prev
for _ in $(seq 1 200); do
  missing=$(missing_of "$prev")
  [ -z "$missing" ] && break
  if [ -n "${PREVIOUS_BUILD:-}" ]; then
    echo "previous-build-smoke: $prev has migrations this tree does not: $missing" >&2
    exit 1
  fi
  prev=$(git rev-parse "$prev^")
done
if [ -n "$(missing_of "$prev")" ]; then
  echo "previous-build-smoke: no build before $start has migrations that are a subset of today's" >&2
  exit 1
fi

tmp=$(mktemp -d)
cleanup() {
  cd "$root"
  git worktree remove --force "$tmp/build" >/dev/null 2>&1 || rm -rf "$tmp"
  git worktree prune
  rm -rf "$tmp"
}
trap cleanup EXIT
git worktree add --detach --quiet "$tmp/build" "$prev"
# Today's migrations replace the old build's (which they extend).
rm -rf "$tmp/build/migrations"
cp -R migrations "$tmp/build/migrations"
if cmp -s package-lock.json "$tmp/build/package-lock.json"; then
  ln -s "$root/node_modules" "$tmp/build/node_modules"
else
  (cd "$tmp/build" && npm ci --ignore-scripts --no-audit --no-fund >/dev/null)
fi

files=()
for f in "${SMOKE[@]}"; do [ -f "$tmp/build/test/api/$f" ] && files+=("test/api/$f"); done
if [ "${#files[@]}" -eq 0 ]; then
  echo "previous-build-smoke: $prev has none of the smoke test files" >&2
  exit 1
fi
echo "previous-build-smoke: the build at $(git log --format='%h %s' -1 "$prev") on today's schema (newest migration $newest): ${files[*]}"
cd "$tmp/build"
npx vitest run --project api "${files[@]}"

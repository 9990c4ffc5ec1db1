#!/bin/sh
# Self-update helper of the installer. The backend runs it detached, in the container
# installer-self-updater made from the NEW installer image, with the host Docker socket, <work-dir>
# and <staging-root> mounted at identical paths:
#
#   sh /usr/src/app/scripts/self-update.sh <project> <work-dir> <compose-file> <staged-compose-file> <rollback-tag> <new-tag> <service>
#
#   0. refuses, before anything is changed (exit 1, no status), a staged file whose directory or
#      staging root (its parent) is a symbolic link, is owned by another user or is writable by group
#      or others, and a staged file whose sha256 is not SELF_UPDATE_STAGED_SHA256 (the digest the
#      backend recorded when it staged the file; docs/adr/0041-trusted-sources-and-staging.md);
#   1. backs up <compose-file> to <compose-file>.pre-update and installs <staged-compose-file>;
#   2. when the compose file has a one-shot <service>-init (the schema migrations), runs it on the new
#      image while the old <service> still serves: VERSION=<new-tag> docker compose -p <project>
#      -f <compose-file> up -d <service>-init, then waits for it to exit, at most
#      SELF_UPDATE_INIT_TIMEOUT seconds (default 900; the init is then removed, its transaction rolls
#      back); a failure counts as a failed switch (docs/adr/0029-migrations-before-the-switch.md);
#   3. switches: VERSION=<new-tag> docker compose -p <project> -f <compose-file> up -d --wait --wait-timeout 300 <service>,
#      with INSTALLER_INIT_REPLICAS=0 so that the init that already ran is not run again while the
#      backend is down; success: status ok, exit 0;
#   4. on failure restores <compose-file>.pre-update and runs the same pinned to VERSION=<rollback-tag>:
#      success: status rolled-back, exit 0; failure: status failed, exit 1, recovery path printed.
#
# One switch, one rollback, no retries, no down-migrations; the rollback runs no migrations. The status file <work-dir>/.self-update-status
# holds ok, rolled-back or failed: a breadcrumb for a human (the installer reconciles by digests).
# A relative <compose-file> is taken in <work-dir>. SELF_UPDATE_WAIT_TIMEOUT replaces the 300 s
# wait, for tests only. Every docker call is bounded (`timeout`): the backend's deadline for this
# helper is the sum of those bounds (src/adapters/self-update.ts, helperBudgetMs). The backend reads the lines starting "self-update: status", "self-update:
# switch failed:" and "self-update: rollback failed:" from the container's output.
set -u

say() { printf 'self-update: %s\n' "$*"; }

if [ "$#" -ne 7 ]; then
  echo "usage: sh self-update.sh <project> <work-dir> <compose-file> <staged-compose-file> <rollback-tag> <new-tag> <service>" >&2
  exit 2
fi
project=$1
work_dir=$2
compose_file=$3
staged=$4
rollback_tag=$5
new_tag=$6
service=$7
wait_timeout=${SELF_UPDATE_WAIT_TIMEOUT:-300}
case $wait_timeout in
  '' | *[!0-9]*) echo "self-update: SELF_UPDATE_WAIT_TIMEOUT must be a number of seconds" >&2; exit 2 ;;
esac
init_timeout=${SELF_UPDATE_INIT_TIMEOUT:-900}
case $init_timeout in
  '' | *[!0-9]*) echo "self-update: SELF_UPDATE_INIT_TIMEOUT must be a number of seconds" >&2; exit 2 ;;
esac

# bounded SECONDS CMD...: CMD, killed after SECONDS (exit 124) so that no step waits forever.
bounded() {
  limit=$1
  shift
  timeout -k 10 "$limit" "$@"
}
status_file=$work_dir/.self-update-status

# Nothing has been touched yet: without the work dir there is nothing to switch.
cd "$work_dir" || { say "cannot enter $work_dir; nothing was changed"; exit 1; }

log=$(mktemp) || exit 1
rc_file=$(mktemp) || exit 1
trap 'rm -f "$log" "$rc_file"' EXIT

write_status() {
  printf '%s\n' "$1" >"$status_file.tmp" && mv -f "$status_file.tmp" "$status_file"
}

# up TAG: the switch command pinned to TAG; its output goes to stdout and to $log; sets rc. With
# INSTALLER_INIT_REPLICAS=0 the compose file's one-shot init is not part of it: the switch's init
# ran before (migrate), and the rollback runs no migrations.
up() {
  say "running: VERSION=$1 INSTALLER_INIT_REPLICAS=0 docker compose -p $project -f $compose_file up -d --wait --wait-timeout $wait_timeout $service"
  { VERSION=$1 INSTALLER_INIT_REPLICAS=0 bounded $((wait_timeout + 120)) docker compose -p "$project" -f "$compose_file" up -d --wait --wait-timeout "$wait_timeout" "$service" 2>&1; echo "$?" >"$rc_file"; } | tee "$log"
  rc=$(cat "$rc_file")
}

# The last line compose printed: usually why it failed ("container installer-backend is unhealthy").
last_line() {
  grep -v '^[[:space:]]*$' "$log" | tail -n 1
}

# migrate TAG: the one-shot <service>-init of the installed compose file on TAG, to its exit; sets rc
# and, on failure, reason (rc 0 also when the file has no such service). Output: stdout and $log.
migrate() {
  init=$service-init
  if ! VERSION=$1 bounded 60 docker compose -p "$project" -f "$compose_file" config --services 2>/dev/null | grep -qx "$init"; then
    rc=0
    return
  fi
  say "running: VERSION=$1 docker compose -p $project -f $compose_file up -d $init"
  { VERSION=$1 bounded 120 docker compose -p "$project" -f "$compose_file" up -d "$init" 2>&1; echo "$?" >"$rc_file"; } | tee "$log"
  rc=$(cat "$rc_file")
  if [ "$rc" -ne 0 ]; then
    reason="$init not started, exit $rc: $(last_line)"
    return
  fi
  id=$(VERSION=$1 bounded 60 docker compose -p "$project" -f "$compose_file" ps -a -q "$init")
  code=$(bounded "$init_timeout" docker wait "$id" 2>&1)
  waited=$?
  bounded 60 docker logs "$id" 2>&1 | tee "$log"
  if [ "$waited" -eq 124 ] || [ "$waited" -eq 137 ]; then
    # Removing the init ends its connection: Postgres rolls its migration transaction back.
    bounded 60 docker rm -f "$id" >/dev/null 2>&1
    rc=1
    reason="$init did not exit within $init_timeout s (SELF_UPDATE_INIT_TIMEOUT) and was removed; its migrations were rolled back"
    return
  fi
  case $code in
    0) rc=0; say "$init exited 0 (schema migrated); $service not touched yet" ;;
    '' | *[!0-9]*) rc=1; reason="cannot wait for $init: $code" ;;
    *) rc=$code; reason="$init exited $code before the switch: $(last_line)" ;;
  esac
}

rm -f "$status_file"
say "updating compose project $project in $work_dir to $new_tag (rollback: $rollback_tag)"

# refuse WHY: the staged file is not installed and nothing has been changed; the backend keeps running.
refuse() {
  rm -f "$compose_file.new"
  say "switch failed: $1"
  say "refused before anything was changed: $service keeps running its current build"
  exit 1
}

# unsafe PATH dir|file: why PATH may not be used (nothing when it may): a symbolic link, not a
# directory or regular file, another owner than this helper's (root), or writable by group or others.
uid=$(id -u)
unsafe() {
  if [ -L "$1" ]; then echo "$1 is a symbolic link"; return; fi
  if [ "$2" = dir ] && [ ! -d "$1" ]; then echo "$1 is not a directory"; return; fi
  if [ "$2" = file ] && [ ! -f "$1" ]; then echo "$1 is not a regular file"; return; fi
  owner_mode=$(stat -c '%u %a' "$1" 2>/dev/null) || { echo "cannot read the owner of $1"; return; }
  owner=${owner_mode% *}
  mode=${owner_mode#* }
  if [ "$owner" != "$uid" ]; then echo "$1 is owned by uid $owner, not by uid $uid"; return; fi
  if [ $((0$mode & 022)) -ne 0 ]; then echo "$1 is writable by group or others (mode $mode)"; fi
}

staged_dir=$(dirname "$staged")
for checked in "$(dirname "$staged_dir") dir" "$staged_dir dir" "$staged file"; do
  why=$(unsafe "${checked% *}" "${checked##* }")
  [ -z "$why" ] || refuse "the staged compose file is not safe to install: $why; another user could have replaced it"
done

# The copy that is installed is the one checked: the staged file cannot change in between.
cp "$staged" "$compose_file.new" || refuse "cannot copy $staged to $compose_file.new"
expected=${SELF_UPDATE_STAGED_SHA256:-}
if [ -z "$expected" ]; then
  say "warning: no digest of the staged file was handed over (a backend that records none started this helper); only its directory was checked"
else
  case $expected in
    *[!0-9a-f]*) refuse "SELF_UPDATE_STAGED_SHA256 is not a sha256 digest" ;;
  esac
  [ "${#expected}" -eq 64 ] || refuse "SELF_UPDATE_STAGED_SHA256 is not a sha256 digest"
  actual=$(sha256sum "$compose_file.new" | cut -d ' ' -f 1)
  [ "$actual" = "$expected" ] || refuse "the staged compose file $staged does not match the digest recorded when it was staged: expected $expected, got $actual"
  say "the staged compose file has the digest recorded when it was staged ($expected)"
fi

backed_up=0
reason=
if cp -p "$compose_file" "$compose_file.pre-update"; then
  backed_up=1
  if mv -f "$compose_file.new" "$compose_file"; then
    say "installed $staged as $compose_file (backup: $compose_file.pre-update)"
    migrate "$new_tag"
    if [ "$rc" -eq 0 ]; then
      up "$new_tag"
      if [ "$rc" -eq 0 ]; then
        write_status ok
        say "status ok: $service runs $new_tag"
        exit 0
      fi
      reason="exit $rc: $(last_line)"
    fi
  else
    rm -f "$compose_file.new"
    reason="cannot install $staged as $compose_file"
  fi
else
  rm -f "$compose_file.new"
  reason="cannot back up $compose_file to $compose_file.pre-update"
fi
say "switch failed: $reason"

if [ "$backed_up" -eq 1 ]; then
  if cp -p "$compose_file.pre-update" "$compose_file"; then
    say "restored $compose_file from $compose_file.pre-update"
  else
    say "cannot restore $compose_file from $compose_file.pre-update"
  fi
fi
up "$rollback_tag"
if [ "$rc" -eq 0 ]; then
  write_status rolled-back
  say "status rolled-back: $service runs $rollback_tag again; the update did not stick"
  exit 0
fi

say "rollback failed: exit $rc: $(last_line)"
write_status failed
say "status failed: the switch and the rollback both failed; the installer is down and needs manual recovery"
say "recovery: fetch the installer compose file from object storage into $work_dir/$compose_file, then: docker compose pull && docker compose up -d"
say "  that is, on the host: cd $work_dir && docker compose -p $project -f $compose_file pull && docker compose -p $project -f $compose_file up -d"
exit 1

#!/usr/bin/env bash
# migrate-host.sh - retire the legacy systemd-based installation on this host.
#
# Run once on the host, as root, before the installer stack is deployed. Intended
# order: this migration, deploy the installer, set .env, start the platform
# (docker compose up). Read a --dry-run first: the step is destructive and
# one-way. Units are stopped, disabled and masked for good; nothing is restored.
#
# Usage: migrate-host.sh [--dry-run] [--yes|-y] [--force] [--stop-timeout=N]
#        migrate-host.sh -h|--help
#
#   --dry-run          echo each command (prefixed "+ ") and change nothing;
#                      never prompts, writes no log
#   --yes, -y          skip the prompt "Proceed? [y/N]" (without it only y, Y,
#                      yes or YES proceed; any other answer aborts)
#   --force            proceed even when docker.service is not active
#   --stop-timeout=N   seconds each unit may take to stop before it is
#                      force-killed (default 60; overrides STOP_TIMEOUT)
#   -h, --help         print this text and exit
#
# What it does, touching nothing but the units named here:
#   1. Each of etl-server.service olap-api.service olap-server.service
#      olap-share-reconnect.timer olap-share-reconnect.service
#      jdbc-bridge.service worker-service.service elt-api.service
#      object-store.service reporting-system.service service-metrics-api.service
#      platform-api.service platform-frontend.service sql-database.service
#      reverse-proxy.service: stop (waiting until stopped), disable, mask (a copy
#      of the unit file goes to BACKUP_DIR). A unit file in /etc/systemd/system
#      cannot be masked: it is moved into BACKUP_DIR instead. Absent or already
#      masked units are reported and skipped, so re-running is safe.
#   2. NFS: stop nfs-server.service; if /etc/exports has lines of the old shared
#      data directory: unexport (exportfs -ua), back up /etc/exports to
#      BACKUP_DIR/exports.bak.<timestamp>, remove those lines, re-export
#      (exportfs -ra). Then nfs-server.service, nfs-blkmap.service,
#      rpcbind.socket and rpcbind.service are handled as in 1.
#   3. Containers: stop (STOP_TIMEOUT) and remove the containers of compose
#      project OLD_REDASH_PROJECT, keeping its volumes for the new stack; the
#      same for the standalone containers in LEFTOVER_CONTAINERS. Other compose
#      projects are only reported. Project "platform" (the new stack) is never
#      touched.
#   4. systemctl daemon-reload and systemctl reset-failed, then a verification:
#      platform units still enabled ("(none — good)") and docker ps names/ports.
#
# Environment:
#   STOP_TIMEOUT         per-unit stop timeout, seconds (default 60)
#   BACKUP_DIR           where moved and masked-away unit files and the exports
#                        backup are kept (default /root/disabled-units)
#   SHARED_DATA_DIR      old shared data directory: export lines for it or a
#                        path below it are removed (default empty: lines whose
#                        path has a component named shared, shared-data,
#                        shared_data, platform-shared or platform_shared)
#   LOG                  run log (default
#                        /var/log/platform-migrate-host-<YYYYMMDD-HHMMSS>.log)
#   OLD_REDASH_PROJECT   compose project of the old reporting stack (default
#                        redash; empty: none; never platform)
#   LEFTOVER_CONTAINERS  space-separated standalone containers to remove
#                        (default qdrant; empty: none)
#
# From the first change on, stdout and stderr go through tee to LOG; the last
# line printed is "Full log: <path>".
# Exit status: 0 done (also --help and --dry-run); 1 refused (not root, systemd
# not running, docker.service not active, any answer but yes, another run in
# progress) or finished with errors; 2 bad usage.
set -uo pipefail

export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
export SYSTEMD_PAGER='' SYSTEMD_COLORS=0

# The allowlist. The timer comes before the service it starts, and the socket
# before the service it activates, so nothing is restarted behind our back.
UNITS=(
  etl-server.service
  olap-api.service
  olap-server.service
  olap-share-reconnect.timer
  olap-share-reconnect.service
  jdbc-bridge.service
  worker-service.service
  elt-api.service
  object-store.service
  reporting-system.service
  service-metrics-api.service
  platform-api.service
  platform-frontend.service
  sql-database.service
  reverse-proxy.service
)
NFS_UNITS=(nfs-server.service nfs-blkmap.service rpcbind.socket rpcbind.service)
PLATFORM_PROJECT=platform
ETC_UNITS=/etc/systemd/system
EXPORTS=/etc/exports
LOCK_FILE=/run/lock/platform-migrate-host.lock
# Directories systemd loads unit files from, besides /etc/systemd/system.
UNIT_DIRS=(/etc/systemd/system.control /run/systemd/system /usr/local/lib/systemd/system /usr/lib/systemd/system /lib/systemd/system)

SELF="${BASH_SOURCE[0]:-$0}"
TS="$(date +%Y%m%d-%H%M%S)"

usage() {
  # The header comment block: from line 2 to the first line that is not a comment.
  if [[ -r $SELF ]]; then
    sed -n '2,/^[^#]/{/^#/!q;s/^# \{0,1\}//;p}' "$SELF"
  else
    echo "Usage: migrate-host.sh [--dry-run] [--yes|-y] [--force] [--stop-timeout=N] [-h|--help]"
  fi
}
usage_error() {
  printf '%s\n' "$1" >&2
  exit 2
}

# ---------------------------------------------------------------- arguments
DRY_RUN=0
ASSUME_YES=0
FORCE=0
TIMEOUT_ARG=''
TIMEOUT_SET=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    --yes | -y) ASSUME_YES=1 ;;
    --force) FORCE=1 ;;
    --stop-timeout=*) TIMEOUT_ARG="${arg#--stop-timeout=}" TIMEOUT_SET=1 ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) usage_error "Unknown option: $arg (try --help)" ;;
  esac
done

STOP_TIMEOUT="${STOP_TIMEOUT:-60}"
if ((TIMEOUT_SET)); then STOP_TIMEOUT="$TIMEOUT_ARG"; fi
BACKUP_DIR="${BACKUP_DIR:-/root/disabled-units}"
SHARED_DATA_DIR="${SHARED_DATA_DIR:-}"
LOG="${LOG:-/var/log/platform-migrate-host-$TS.log}"
OLD_REDASH_PROJECT="${OLD_REDASH_PROJECT-redash}"
LEFTOVER_CONTAINERS="${LEFTOVER_CONTAINERS-qdrant}"

[[ $STOP_TIMEOUT =~ ^[1-9][0-9]{0,5}$ ]] ||
  usage_error "Invalid stop timeout: '$STOP_TIMEOUT' (whole seconds, at least 1; try --help)"
[[ $BACKUP_DIR == /* ]] || usage_error "BACKUP_DIR must be an absolute path, not '$BACKUP_DIR'"
[[ $LOG == /* && $LOG != */ ]] || usage_error "LOG must be an absolute file path, not '$LOG'"
if [[ -n $SHARED_DATA_DIR ]]; then
  while [[ $SHARED_DATA_DIR == */ && $SHARED_DATA_DIR != / ]]; do SHARED_DATA_DIR="${SHARED_DATA_DIR%/}"; done
  [[ $SHARED_DATA_DIR == /?* ]] || usage_error "SHARED_DATA_DIR must be an absolute path other than /, not '$SHARED_DATA_DIR'"
fi
[[ $OLD_REDASH_PROJECT != "$PLATFORM_PROJECT" ]] ||
  usage_error "OLD_REDASH_PROJECT=$PLATFORM_PROJECT names the new stack, which this script never touches"
read -r -a LEFTOVERS <<<"$LEFTOVER_CONTAINERS"

# An export line: optional blanks, the path (optionally in double quotes), then
# blanks or the end of the line. Comment lines never match.
if [[ -n $SHARED_DATA_DIR ]]; then
  # shellcheck disable=SC2001,SC2016  # escape every ERE special ($ is literal here)
  path_re="$(sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$SHARED_DATA_DIR")(/[^[:space:]\"]*)?"
  MATCH_DESC="SHARED_DATA_DIR=$SHARED_DATA_DIR and paths below it"
else
  path_re='/([^[:space:]"]*/)?(platform[-_])?shared([-_]data)?(/[^[:space:]"]*)?'
  MATCH_DESC="legacy pattern: a path component named shared, shared-data, shared_data, platform-shared or platform_shared"
fi
EXPORT_RE="^[[:space:]]*\"?${path_re}\"?([[:space:]]|\$)"

# ---------------------------------------------------------------- output helpers
ERRORS=0
CHANGED=0
SKIPPED=0
BACKUP_READY=0

say() { printf '%s\n' "$*"; }
section() { printf '\n== %s\n' "$*"; }
warn() { printf 'WARNING: %s\n' "$*"; }
err() {
  printf 'ERROR: %s\n' "$*"
  ERRORS=$((ERRORS + 1))
}

# quote_cmd WORD...: the command as one shell-readable line.
quote_cmd() {
  local out='' w
  for w in "$@"; do
    if [[ $w =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
      out+=" $w"
    else
      out+=" '${w//\'/\'\\\'\'}'"
    fi
  done
  printf '%s' "${out# }"
}

# try CMD...: echo the command; unless dry-run, run it and return its status.
try() {
  printf '+ %s\n' "$(quote_cmd "$@")"
  ((DRY_RUN)) && return 0
  "$@"
}
# run CMD...: like try, and a failure counts as an error.
run() {
  local rc=0
  try "$@" || rc=$?
  ((rc == 0)) || err "exit status $rc: $(quote_cmd "$@")"
  return "$rc"
}

# ---------------------------------------------------------------- preconditions
if ((EUID != 0)); then
  say "migrate-host.sh must be run as root: it stops, disables and masks system units (try: sudo bash $SELF)" >&2
  exit 1
fi
if [[ ! -d /run/systemd/system ]]; then
  say "systemd is not running here (no /run/systemd/system): run this on the host itself, or from a container through 'nsenter -t 1 -a -- bash $SELF'" >&2
  exit 1
fi
DOCKER_NOTE=''
if ! systemctl is-active --quiet docker.service; then
  if ((FORCE)); then
    DOCKER_NOTE="WARNING: docker.service is not active; continuing because of --force (container steps need a reachable Docker engine)"
  else
    say "docker.service is not active: start Docker first (systemctl start docker.service), or pass --force to proceed without it" >&2
    exit 1
  fi
fi

# ---------------------------------------------------------------- plan and prompt
preamble() {
  say "migrate-host.sh: retire the legacy systemd-based installation on $(hostname 2>/dev/null || echo 'this host')"
  if ((DRY_RUN)); then
    say "  mode:            DRY RUN: commands are echoed, nothing is changed"
  else
    say "  mode:            real run: destructive and one-way, nothing is restored"
  fi
  say "  units:           ${UNITS[*]}"
  say "  NFS units:       ${NFS_UNITS[*]}"
  say "  stop timeout:    $STOP_TIMEOUT s per unit, then force-kill"
  say "  backup dir:      $BACKUP_DIR"
  say "  exports match:   $MATCH_DESC"
  say "  reporting stack: compose project '${OLD_REDASH_PROJECT:-(none)}': containers removed, volumes kept"
  say "  leftovers:       ${LEFTOVER_CONTAINERS:-(none)}"
  if ((DRY_RUN)); then say "  log:             none (dry run)"; else say "  log:             $LOG"; fi
  if [[ -n $DOCKER_NOTE ]]; then say "$DOCKER_NOTE"; fi
}
PREAMBLE="$(preamble)"
say "$PREAMBLE"

if ((!DRY_RUN && !ASSUME_YES)); then
  printf 'Proceed? [y/N] '
  answer=''
  IFS= read -r answer || echo
  case "$answer" in
    y | Y | yes | YES) ;;
    *)
      say "Aborted: nothing was changed."
      exit 1
      ;;
  esac
fi

# ---------------------------------------------------------------- log (real work begins)
TEE_PID=''
finish_log() {
  [[ -n $TEE_PID ]] || return 0
  exec 1>&3 2>&4 3>&- 4>&-
  # Wait for tee to write the last lines, so "Full log:" really is the last one.
  wait "$TEE_PID" 2>/dev/null || while kill -0 "$TEE_PID" 2>/dev/null; do sleep 0.05; done
}
if ((!DRY_RUN)); then
  { exec 9>"$LOCK_FILE"; } 2>/dev/null || exec 9>/tmp/platform-migrate-host.lock
  if ! flock -n 9; then
    say "another migrate-host.sh is running (lock $LOCK_FILE): not starting a second one" >&2
    exit 1
  fi
  if ! mkdir -p "$(dirname "$LOG")" || ! say "$PREAMBLE" >>"$LOG"; then
    say "cannot write the log $LOG: nothing was changed" >&2
    exit 1
  fi
  exec 3>&1 4>&2
  exec > >(tee -a "$LOG") 2>&1
  TEE_PID=$!
  trap finish_log EXIT
fi

# ---------------------------------------------------------------- units
active_state() { systemctl show -p ActiveState --value "$1" 2>/dev/null; }
load_state() { systemctl show -p LoadState --value "$1" 2>/dev/null; }

ensure_backup_dir() {
  ((BACKUP_READY)) && return 0
  BACKUP_READY=1
  if [[ -d $BACKUP_DIR ]]; then return 0; fi
  run mkdir -p -m 0700 "$BACKUP_DIR"
}

# backup_path NAME: a path in BACKUP_DIR that does not exist yet.
backup_path() {
  local p="$BACKUP_DIR/$1" i=1
  while [[ -e $p || -L $p ]]; do
    p="$BACKUP_DIR/$1.$i"
    i=$((i + 1))
  done
  printf '%s' "$p"
}

# stop_unit UNIT: stop and wait until stopped; force-kill after STOP_TIMEOUT.
stop_unit() {
  local u="$1" st rc=0 i
  st="$(active_state "$u")"
  case "$st" in
    inactive | failed | '')
      say "  $u is not running"
      return 0
      ;;
  esac
  try timeout "$STOP_TIMEOUT" systemctl stop "$u" || rc=$?
  ((DRY_RUN)) && return 0
  if ((rc == 124)); then
    warn "$u did not stop within $STOP_TIMEOUT s: force-killing it"
    run systemctl kill --signal=SIGKILL "$u"
    for ((i = 0; i < 100; i++)); do
      st="$(active_state "$u")"
      [[ $st == inactive || $st == failed ]] && break
      sleep 0.1
    done
    if [[ $st == inactive || $st == failed ]]; then
      say "  $u stopped (force-killed)"
    else
      err "$u is still $st after SIGKILL"
      return 1
    fi
  elif ((rc != 0)); then
    err "stopping $u failed (exit status $rc)"
    return 1
  else
    say "  $u stopped"
  fi
}

# other_copy UNIT: true if a unit file for UNIT exists outside /etc/systemd/system.
other_copy() {
  local d
  for d in "${UNIT_DIRS[@]}"; do
    [[ -e $d/$1 ]] && return 0
  done
  return 1
}

# retire_unit UNIT: stop, disable, then mask (or move out of /etc/systemd/system).
retire_unit() {
  local u="$1" load frag
  load="$(load_state "$u")"
  case "$load" in
    not-found | '')
      if [[ -e $BACKUP_DIR/$u ]]; then
        say "skip: $u is not installed (a unit file of that name is in $BACKUP_DIR)"
      else
        say "skip: $u is not installed"
      fi
      SKIPPED=$((SKIPPED + 1))
      return 0
      ;;
    masked)
      say "skip: $u is already masked"
      SKIPPED=$((SKIPPED + 1))
      return 0
      ;;
    loaded) ;;
    *)
      err "$u cannot be loaded (LoadState=$load): left as it is"
      return 1
      ;;
  esac
  frag="$(systemctl show -p FragmentPath --value "$u" 2>/dev/null)"
  say "$u (${frag:-no unit file})"
  stop_unit "$u"
  run systemctl disable "$u"
  ensure_backup_dir
  if [[ $frag == "$ETC_UNITS"/* ]]; then
    say "  $frag is in $ETC_UNITS, where mask cannot cover it: moving it to $BACKUP_DIR"
    run mv "$frag" "$(backup_path "${frag##*/}")"
    # A vendor copy would take over once the file is gone: mask that one.
    if other_copy "$u"; then run systemctl mask "$u"; fi
  else
    if [[ -n $frag && -e $frag ]]; then run cp -p "$frag" "$(backup_path "${frag##*/}")"; fi
    run systemctl mask "$u"
  fi
  CHANGED=$((CHANGED + 1))
}

section "Units"
for u in "${UNITS[@]}"; do retire_unit "$u"; done

# ---------------------------------------------------------------- NFS
section "NFS"
stop_unit nfs-server.service
if [[ ! -f $EXPORTS ]]; then
  say "no $EXPORTS: no export lines to remove"
else
  matches="$(grep -nE -- "$EXPORT_RE" "$EXPORTS" || :)"
  if [[ -z $matches ]]; then
    say "no line of $EXPORTS matches ($MATCH_DESC): left unchanged"
  else
    say "lines of $EXPORTS to remove ($MATCH_DESC):"
    while IFS= read -r line; do say "  $line"; done <<<"$matches"
    if grep -qE -- "$EXPORT_RE" <(grep -E '\\$' "$EXPORTS"); then
      warn "a matching line of $EXPORTS ends with a backslash: check its continuation by hand"
    fi
    have_exportfs=0
    if command -v exportfs >/dev/null 2>&1; then
      have_exportfs=1
      run exportfs -ua
    else
      say "  exportfs not found (no NFS server tools installed): not unexporting"
    fi
    ensure_backup_dir
    if run cp -p "$EXPORTS" "$(backup_path "exports.bak.$TS")"; then
      run sed -E -i "\\#${EXPORT_RE//#/\\#}#d" "$EXPORTS"
    else
      err "$EXPORTS was not edited because its backup failed"
    fi
    if ((have_exportfs)); then
      run exportfs -ra
    else
      say "  exportfs not found: not re-exporting"
    fi
  fi
fi
for u in "${NFS_UNITS[@]}"; do retire_unit "$u"; done

# ---------------------------------------------------------------- containers
section "Leftover containers"
docker_ok=0
if ! command -v docker >/dev/null 2>&1; then
  if ((FORCE)); then warn "no docker command: container steps skipped"; else err "no docker command: container steps skipped"; fi
elif ! docker version >/dev/null 2>&1; then
  if ((FORCE)); then warn "the Docker engine does not answer: container steps skipped"; else err "the Docker engine does not answer: container steps skipped"; fi
else
  docker_ok=1
fi

# remove_containers NAME...: graceful stop, then removal (volumes are never removed).
remove_containers() {
  run docker stop -t "$STOP_TIMEOUT" "$@"
  run docker rm -f "$@"
  CHANGED=$((CHANGED + $#))
}

if ((docker_ok)); then
  if [[ -z $OLD_REDASH_PROJECT ]]; then
    say "OLD_REDASH_PROJECT is empty: no reporting stack to remove"
  else
    mapfile -t names < <(docker ps -a --filter "label=com.docker.compose.project=$OLD_REDASH_PROJECT" --format '{{.Names}}' | sort)
    if ((${#names[@]} == 0)); then
      say "no containers of compose project $OLD_REDASH_PROJECT"
    else
      say "compose project $OLD_REDASH_PROJECT: removing ${#names[@]} container(s), keeping its volumes"
      remove_containers "${names[@]}"
    fi
    mapfile -t vols < <(docker volume ls -q --filter "label=com.docker.compose.project=$OLD_REDASH_PROJECT" | sort)
    if ((${#vols[@]})); then say "  volumes kept for the new stack: ${vols[*]}"; fi
  fi

  mapfile -t all_names < <(docker ps -a --format '{{.Names}}')
  for n in "${LEFTOVERS[@]}"; do
    found=0
    for a in "${all_names[@]}"; do [[ $a == "$n" ]] && found=1 && break; done
    if ((!found)); then
      say "no container named $n"
      continue
    fi
    project="$(docker container inspect -f '{{index .Config.Labels "com.docker.compose.project"}}' "$n" 2>/dev/null || :)"
    if [[ $project == "$PLATFORM_PROJECT" ]]; then
      warn "container $n belongs to compose project $PLATFORM_PROJECT (the new stack): left alone"
      continue
    fi
    say "standalone leftover container $n: removing it"
    remove_containers "$n"
  done

  # Report every other compose project; remove none.
  while read -r count project; do
    [[ -z $project || $project == "$OLD_REDASH_PROJECT" ]] && continue
    if [[ $project == "$PLATFORM_PROJECT" ]]; then
      say "compose project $project ($count container(s)): the new stack, not touched"
    else
      say "compose project $project ($count container(s)): not part of this migration, left as it is"
    fi
  done < <(docker ps -a --format '{{.Label "com.docker.compose.project"}}' | sort | uniq -c)
fi

# ---------------------------------------------------------------- reload
section "systemd"
run systemctl daemon-reload
run systemctl reset-failed

# ---------------------------------------------------------------- verification
section "Verification"
if ((DRY_RUN)); then say "(dry run: this is the state before any change)"; fi
unit_re="^($(printf '%s|' "${UNITS[@]}" "${NFS_UNITS[@]}" | sed 's/|$//; s/\./\\./g'))[[:space:]]"
say "+ systemctl list-unit-files --state=enabled --no-legend --no-pager | grep -E '$unit_re'"
enabled="$(systemctl list-unit-files --state=enabled --no-legend --no-pager | grep -E "$unit_re" || :)"
if [[ -z $enabled ]]; then
  say "(none — good)"
else
  say "$enabled"
  ((DRY_RUN)) || err "platform units are still enabled (listed above)"
fi
if ((docker_ok)); then
  say "+ docker ps --format 'table {{.Names}}\t{{.Ports}}'"
  docker ps --format 'table {{.Names}}\t{{.Ports}}' || err "docker ps failed"
fi

# ---------------------------------------------------------------- summary
echo
if ((DRY_RUN)); then
  if ((ERRORS)); then
    say "Dry run finished with $ERRORS error(s): nothing was changed."
    exit 1
  fi
  say "Dry run finished: nothing was changed. Run again without --dry-run to apply."
  exit 0
fi
if ((ERRORS)); then
  say "Finished with $ERRORS error(s) ($CHANGED changed, $SKIPPED skipped): read the log before going on."
else
  say "Done: $CHANGED changed, $SKIPPED skipped. Next: deploy the installer."
fi
say "Full log: $LOG"
((ERRORS == 0))

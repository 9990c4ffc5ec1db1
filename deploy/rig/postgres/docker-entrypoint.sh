#!/usr/bin/env bash
# Entrypoint of installer-rig/postgres:15. Honours the part of the official
# `postgres` image's interface that compose files use:
#   POSTGRES_PASSWORD / POSTGRES_PASSWORD_FILE  (required unless POSTGRES_HOST_AUTH_METHOD=trust)
#   POSTGRES_USER / POSTGRES_USER_FILE          (default: postgres)
#   POSTGRES_DB / POSTGRES_DB_FILE              (default: $POSTGRES_USER)
#   POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD (default: scram-sha-256)
#   PGDATA                                      (default: /var/lib/postgresql/data)
#   /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz, run once after initdb
# On first start it runs initdb (password auth for every TCP client, trust on the
# unix socket inside the container), creates the user and database, then execs
# postgres in the foreground as user postgres, listening on '*':5432.
set -Eeuo pipefail

: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA

# file_env VAR [DEFAULT]: VAR from $VAR or from the file named by $VAR_FILE.
file_env() {
  local var="$1" file_var="${1}_FILE" def="${2:-}" val
  if [[ -n ${!var:-} && -n ${!file_var:-} ]]; then
    echo "error: both $var and $file_var are set (but are exclusive)" >&2
    exit 1
  fi
  val="$def"
  if [[ -n ${!var:-} ]]; then
    val="${!var}"
  elif [[ -n ${!file_var:-} ]]; then
    val="$(<"${!file_var}")"
  fi
  export "$var"="$val"
  unset "$file_var"
}

docker_temp_server_start() {
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -p 5432" start >/dev/null
}

docker_temp_server_stop() {
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
}

psql_super() {
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc "$@"
}

init_database() {
  file_env POSTGRES_PASSWORD
  file_env POSTGRES_USER postgres
  file_env POSTGRES_DB "$POSTGRES_USER"
  file_env POSTGRES_INITDB_ARGS
  : "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"

  if [[ -z $POSTGRES_PASSWORD && $POSTGRES_HOST_AUTH_METHOD != trust ]]; then
    cat >&2 <<'MSG'
Error: Database is uninitialized and superuser password is not specified.
       Set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) to a non-empty value,
       or POSTGRES_HOST_AUTH_METHOD=trust to allow all connections without a password.
MSG
    exit 1
  fi

  local -a initdb_args=(--username="$POSTGRES_USER" --auth-local=trust --auth-host="$POSTGRES_HOST_AUTH_METHOD")
  local pwfile=""
  if [[ -n $POSTGRES_PASSWORD ]]; then
    # A file, not <(...): a process substitution stored in an array is closed
    # before initdb runs.
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb_args+=(--pwfile="$pwfile")
  fi
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a word list, as in the official image
  initdb "${initdb_args[@]}" $POSTGRES_INITDB_ARGS || { rm -f "$pwfile"; exit 1; }
  rm -f "$pwfile"

  {
    echo
    echo "listen_addresses = '*'"
  } >>"$PGDATA/postgresql.conf"
  {
    echo
    echo "host all all all $POSTGRES_HOST_AUTH_METHOD"
  } >>"$PGDATA/pg_hba.conf"

  docker_temp_server_start
  if [[ $POSTGRES_DB != postgres ]]; then
    echo 'CREATE DATABASE :"db";' | psql_super --dbname postgres --set db="$POSTGRES_DB"
  fi
  local f
  for f in /docker-entrypoint-initdb.d/*; do
    [[ -e $f ]] || continue
    case "$f" in
      *.sh)
        echo "$0: running $f"
        if [[ -x $f ]]; then "$f"; else # shellcheck disable=SC1090
          . "$f"; fi
        ;;
      *.sql) echo "$0: running $f"; psql_super --dbname "$POSTGRES_DB" -f "$f" ;;
      *.sql.gz) echo "$0: running $f"; gunzip -c "$f" | psql_super --dbname "$POSTGRES_DB" ;;
      *) echo "$0: ignoring $f" ;;
    esac
  done
  docker_temp_server_stop
  unset PGPASSWORD
  echo "PostgreSQL init process complete; ready for start up."
}

# `docker run image -c foo=bar` means `postgres -c foo=bar`.
if [[ ${1:-} == -* ]]; then
  set -- postgres "$@"
fi

if [[ ${1:-} == postgres ]]; then
  if [[ $(id -u) == 0 ]]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chmod 0700 "$PGDATA" || :
    find "$PGDATA" \! -user postgres -exec chown postgres:postgres '{}' +
    chown postgres:postgres /var/run/postgresql
    chmod 3777 /var/run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
  fi
  if [[ ! -s $PGDATA/PG_VERSION ]]; then
    init_database
  fi
fi

exec "$@"

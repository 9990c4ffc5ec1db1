#!/bin/bash
# Builds the legacy-host fixture inside installer-rig/systemd-host (run once by the
# Dockerfile). Every unit is a dummy; the cases scripts/migrate-host.sh must handle:
#
#   unit                          where                 state at boot
#   etl-server.service            /lib/systemd/system   enabled, running
#   olap-api.service              /lib/systemd/system   enabled, running
#   olap-server.service           /lib/systemd/system   enabled, running
#   olap-share-reconnect.service  /lib/systemd/system   static oneshot, run by the timer
#   olap-share-reconnect.timer    /lib/systemd/system   enabled, active
#   jdbc-bridge.service           /lib/systemd/system   installed, disabled, not running
#   worker-service.service        -                     absent
#   elt-api.service               /lib/systemd/system   already masked
#   object-store.service          /lib/systemd/system   enabled, running
#   reporting-system.service      /lib/systemd/system   enabled, running (shell loop)
#   service-metrics-api.service   /lib/systemd/system   enabled, running
#   platform-api.service          /lib/systemd/system   enabled, running
#   platform-frontend.service     /lib/systemd/system   enabled, running
#   sql-database.service          /lib/systemd/system   enabled, running, ignores SIGTERM
#   reverse-proxy.service         /etc/systemd/system   enabled, running (cannot be masked)
#   nfs-server.service, nfs-blkmap.service, rpcbind.service, rpcbind.socket
#                                 /lib/systemd/system   enabled, running / listening
#   docker.service                /lib/systemd/system   enabled, running (the engine is the
#                                                       rig's, through /run/docker.sock)
#   build-server.service          /lib/systemd/system   enabled, running (not on the
#                                                       allowlist: must be left alone)
#
# Plus /etc/exports (lines of the legacy shared directory and others), the export
# table /var/lib/nfs/etab as if exported at boot, and a non-root user `migrate-op`.
set -euo pipefail

LIB=/lib/systemd/system
ETC=/etc/systemd/system

# unit DIR NAME: writes stdin to DIR/NAME.
unit() { cat >"$1/$2"; }

# daemon DIR NAME DESCRIPTION [EXECSTART]: a long-running dummy service.
daemon() {
  unit "$1" "$2" <<UNIT
[Unit]
Description=$3 (rig dummy)

[Service]
ExecStart=${4:-/bin/sleep infinity}

[Install]
WantedBy=multi-user.target
UNIT
}

daemon $LIB etl-server.service 'data integration server'
daemon $LIB olap-api.service 'analytics API'
daemon $LIB olap-server.service 'analytics database server'
daemon $LIB jdbc-bridge.service 'analytics JDBC bridge'
daemon $LIB elt-api.service 'ELT API'
daemon $LIB object-store.service 'object store'
daemon $LIB reporting-system.service 'reporting system' "/bin/sh -c 'while :; do sleep 1; done'"
daemon $LIB service-metrics-api.service 'service metrics API'
daemon $LIB platform-api.service 'old backend API'
daemon $LIB platform-frontend.service 'old frontend'
daemon $ETC reverse-proxy.service 'old reverse proxy, installed by hand in /etc'
daemon $LIB nfs-server.service 'NFS server and services'
daemon $LIB nfs-blkmap.service 'pNFS block layout mapping daemon'
daemon $LIB rpcbind.service 'RPC bind portmap service'
daemon $LIB docker.service 'Docker Application Container Engine'
daemon $LIB build-server.service 'build server (not part of the platform)'

# A database that ignores SIGTERM: only a force-kill stops it (systemd's own stop
# timeout is set far beyond any --stop-timeout the tests use).
unit $LIB sql-database.service <<'UNIT'
[Unit]
Description=old SQL database (rig dummy; ignores SIGTERM)

[Service]
ExecStart=/bin/sh -c 'trap "" TERM; exec /bin/sleep infinity'
TimeoutStopSec=600

[Install]
WantedBy=multi-user.target
UNIT

unit $LIB olap-share-reconnect.service <<'UNIT'
[Unit]
Description=reconnects the analytics NFS share (rig dummy)

[Service]
Type=oneshot
ExecStart=/bin/true
UNIT

unit $LIB olap-share-reconnect.timer <<'UNIT'
[Unit]
Description=schedules the share reconnect (rig dummy)

[Timer]
OnBootSec=1h
OnUnitActiveSec=1h

[Install]
WantedBy=timers.target
UNIT

unit $LIB rpcbind.socket <<'UNIT'
[Unit]
Description=RPCbind server activation socket (rig dummy)

[Socket]
ListenStream=/run/rpcbind.sock

[Install]
WantedBy=sockets.target
UNIT

systemctl enable \
  etl-server.service olap-api.service olap-server.service olap-share-reconnect.timer \
  object-store.service reporting-system.service service-metrics-api.service \
  platform-api.service platform-frontend.service sql-database.service reverse-proxy.service \
  nfs-server.service nfs-blkmap.service rpcbind.socket rpcbind.service \
  docker.service build-server.service
systemctl mask elt-api.service

cat >/etc/exports <<'EXPORTS'
# /etc/exports: the access control list for filesystems which may be exported
#		to NFS clients.  See exports(5).
#
# The old platform's shared data directory and the analytics share below it:
/srv/shared-data          10.0.0.0/24(rw,sync,no_subtree_check,no_root_squash)
/srv/shared-data/olap     olap.internal(rw,sync,no_subtree_check)
# Not the platform's:
/home/backup              10.0.0.9(ro,sync,no_subtree_check)
/srv/sharedfolder         *(ro,sync,no_subtree_check)
EXPORTS
mkdir -p /srv/shared-data/olap /home/backup /srv/sharedfolder /var/lib/nfs
grep -Ev '^[[:space:]]*(#|$)' /etc/exports >/var/lib/nfs/etab

useradd --create-home --shell /bin/bash --user-group --uid 1000 migrate-op

#!/bin/sh
# PID 1 of installer-rig/systemd-host. systemd needs the cgroup hierarchies
# writable; a container without --privileged has them read-only, so they are
# remounted read-write (a no-op when privileged). Then systemd takes over as PID 1.
for d in /sys/fs/cgroup/*; do
  [ -d "$d" ] && mount -o remount,bind,rw "$d" 2>/dev/null
done
exec /lib/systemd/systemd

#!/bin/sh
# PID 1 of installer-rig/systemd-host. Without --privileged, Docker mounts the
# cgroup hierarchies read-only; systemd needs them writable (docs/rig.md). Then
# systemd takes over as PID 1.
for d in /sys/fs/cgroup/*; do
  [ -d "$d" ] && mount -o remount,bind,rw "$d" 2>/dev/null
done
exec /lib/systemd/systemd

#!/bin/sh
# A worker engine: the registry relay (when REGISTRY_RELAY names the machine's side of it), then
# dockerd as PID 1, so `docker stop` stops the engine and a `docker kill` loses the node at once.
set -eu
if [ -n "${REGISTRY_RELAY:-}" ]; then
  socat TCP-LISTEN:5000,bind=127.0.0.1,fork,reuseaddr "TCP:$REGISTRY_RELAY" &
fi
# A node killed and started again finds the pid files of its last run, which name PID 1: itself now.
rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid
exec dockerd --storage-driver=overlay2 -H unix:///var/run/docker.sock "$@"

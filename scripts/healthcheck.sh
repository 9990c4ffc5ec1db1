#!/usr/bin/env bash
# The image's HEALTHCHECK (deploy/Dockerfile): healthy only when GET /api/health on PORT answers 200
# with status ok and the database up. Bash's own TCP, no other process: the engine runs it every
# second, and a Node process per check cost a tenth of a core (docs/self-update.md, "Figures").
set -u
{ exec 3<>"/dev/tcp/127.0.0.1/${PORT:-8080}"; } 2>/dev/null || exit 1
printf 'GET /api/health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
# HTTP/1.0: the backend closes the connection after its answer; read to the end, 2 s at most.
IFS= read -r -t 2 -d '' answer <&3 || [ -n "${answer:-}" ] || exit 1
[[ $answer == HTTP/1.[01]\ 200\ * && $answer == *'"status":"ok"'* && $answer == *'"db":"up"'* ]]

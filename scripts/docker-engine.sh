#!/usr/bin/env bash
# A Docker engine for CI, started and stopped by whoever needs one for longer than one script.
#   docker-engine.sh start   an engine answers afterwards: the one already running, else a dockerd started
#                            here (Debian's docker.io installed first if need be; root only), whose pid is
#                            written to $DOCKERD_PIDFILE
#   docker-engine.sh stop    stops the dockerd `start` started (by that pid, never by name); an engine this
#                            script did not start is left alone
# .ci/run starts one before the container stage and stops it after the suite, so the suite's docker
# backend tests run against it (GRADER_REQUIRE_DOCKER=1: skipping them is a failure there).
set -euo pipefail
PIDFILE=${DOCKERD_PIDFILE:-/tmp/dist-grader-dockerd.pid}
LOG=${DOCKERD_LOG:-/tmp/dist-grader-dockerd.log}

say() { printf '[docker-engine] %s\n' "$*" >&2; }
die() { printf '[docker-engine] FAILED: %s\n' "$*" >&2; exit 1; }

start() {
    docker info >/dev/null 2>&1 && { say "an engine already answers"; return 0; }
    [[ $(id -u) == 0 ]] || die "no Docker engine answers and only root can install or start one here"
    if ! command -v dockerd >/dev/null; then
        say "installing Debian's docker.io"
        apt-get install -y --no-install-recommends docker.io >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get install -y --no-install-recommends docker.io >/dev/null; } \
            || die "apt-get install docker.io failed"
    fi
    say "starting dockerd (log: $LOG)"
    setsid dockerd >"$LOG" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || { tail -n 20 "$LOG" >&2; rm -f "$PIDFILE"; die "dockerd exited"; }
        sleep 1
    done
    tail -n 20 "$LOG" >&2
    stop
    die "dockerd did not answer within 60 s"
}

stop() {
    [[ -f $PIDFILE ]] || return 0
    local pid
    pid=$(cat "$PIDFILE")
    rm -f "$PIDFILE"
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 0
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]] || return 0  # a stale file: that pid is another process now
    say "stopping the dockerd started here (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 start|stop" ;;
esac

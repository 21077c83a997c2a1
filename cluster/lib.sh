# Shared by up.sh and down.sh: where the cluster's state lives, and how a component is started,
# waited for and stopped. Every daemon is a host process started with setsid; its pid file is
# the only way down.sh finds it, so nothing it did not start is ever stopped.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
state=${CLUSTER_DIR:-$root/.cluster}
bin=$state/bin
pki=$state/pki
logs=$state/logs
run=$state/run
export PATH=$bin:$PATH

say() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }

fail() {  # component, what went wrong
  local log=$logs/$1.log
  echo "cluster: $1: $2" >&2
  if [ -f "$log" ]; then
    echo "--- last lines of $log ---" >&2
    tail -n 20 "$log" >&2
  fi
  exit 1
}

running() { [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2>/dev/null; }

start() {  # component, command...: started once; a running one is left as it is
  local name=$1; shift
  if running "$name"; then
    return
  fi
  setsid "$@" >>"$logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$run/$name.pid"
}

wait_for() {  # component, seconds, description, command...: polls until the command succeeds
  local name=$1 limit=$2 what=$3; shift 3
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ -f "$run/$name.pid" ] && ! running "$name"; then
      fail "$name" "exited while waiting for $what"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail "$name" "no $what after ${limit} s"
    fi
    sleep 0.5
  done
}

stop() {  # component: SIGTERM to its process group, then SIGKILL after 10 s
  local name=$1 pid
  [ -f "$run/$name.pid" ] || return 0
  pid=$(cat "$run/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$run/$name.pid"
}

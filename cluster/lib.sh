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

# name, namespace, ServiceAccount, Secret, command...: a controller-runtime controller whose cert
# rotator keeps its webhook certificate in that Secret. Its webhook server and the rotator both
# use the fixed /tmp/k8s-webhook-server/serving-certs, so each controller gets a private tmpfs
# there (its own mount namespace), and a loop beside it writes the Secret's certificate into
# it, as a kubelet would mount it. The command runs as the ServiceAccount (KUBECONFIG).
start_webhook_controller() {
  local name=$1 namespace=$2 account=$3 secret=$4; shift 4
  running "$name" && return
  token_kubeconfig "$state/$name.kubeconfig" "$namespace" "$account" "$server" \
    || fail "$name" "no token for its ServiceAccount $namespace/$account"
  mkdir -p /tmp/k8s-webhook-server
  start "$name" unshare --mount --propagation private env \
    KUBECONFIG="$state/$name.kubeconfig" ADMIN="$state/admin.kubeconfig" \
    CERT_NAMESPACE="$namespace" CERT_SECRET="$secret" \
    bash -c '
      set -e
      mount -t tmpfs -o size=1m,mode=0700 tmpfs /tmp/k8s-webhook-server
      mkdir -p /tmp/k8s-webhook-server/serving-certs
      ( cd /tmp/k8s-webhook-server/serving-certs
        # Each second until the rotator has written the Secret, then each minute (rotation).
        while if [ -s tls.key ]; then sleep 60; else sleep 1; fi; do
          for key in tls.crt tls.key; do
            value=$(kubectl --kubeconfig "$ADMIN" -n "$CERT_NAMESPACE" get secret "$CERT_SECRET" \
              -o "jsonpath={.data.${key//./\\.}}" 2>/dev/null || true)
            [ -n "$value" ] && echo "$value" | base64 -d > "$key.new" && mv "$key.new" "$key"
          done
        done ) &
      exec "$@"' "$name" "$@"
}

# directory, namespace, Deployment, Service, endpoint ports (a YAML flow list), extra
# kustomization lines, resources...: a kustomization of upstream's manifests (read from the
# module cache) for a controller that runs here as a host process. Its Deployment is removed,
# and its webhook Service loses its selector and gets this machine ($node_ip) as its endpoint.
host_overlay() {
  local dir=$1 namespace=$2 deployment=$3 service=$4 ports=$5 extra=$6 resource; shift 6
  mkdir -p "$dir"
  {
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n'
    for resource in "$@" endpoints.yaml; do
      # kustomize takes only relative paths to a base.
      case $resource in /*) resource=$(realpath --relative-to "$dir" "$resource") ;; esac
      echo "  - $resource"
    done
    cat <<YAML
patches:
  - target: {kind: Deployment, name: $deployment}
    patch: |
      \$patch: delete
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: $deployment}
  - target: {kind: Service, name: $service}
    patch: |
      - {op: remove, path: /spec/selector}
$extra
YAML
  } > "$dir/kustomization.yaml"
  cat > "$dir/endpoints.yaml" <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: $service-host
  namespace: $namespace
  labels: {kubernetes.io/service-name: $service}
addressType: IPv4
endpoints: [{addresses: ["$node_ip"]}]
ports: $ports
YAML
}

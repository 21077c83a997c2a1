#!/usr/bin/env bash
# make cluster: a Kubernetes control plane, the training-operator and simulated GPU node pools,
# from upstream's own Go modules, as host processes (no Docker). Idempotent: what runs is left
# running; a second call only checks. Writes .cluster/kubeconfig (admin) and
# .cluster/user.kubeconfig (a user with only the shipped manifests/rbac rights).
source "$(dirname "$0")/lib.sh"
source "$here/pki.sh"
source "$here/node.sh"

[ "$(id -u)" = 0 ] || { echo "cluster: make cluster runs as root (it starts etcd, the API server and controllers as host processes)" >&2; exit 1; }
for tool in go openssl curl ip; do
  command -v "$tool" >/dev/null || { echo "cluster: $tool is missing (install it, or run make system-packages)" >&2; exit 1; }
done

mkdir -p "$state" "$logs" "$run"
begun=$SECONDS
"$here/build.sh"

node_ip=${CLUSTER_NODE_IP:-$(ip -4 -o addr show scope global | awk 'NR == 1 {split($4, a, "/"); print a[1]}')}
[ -n "$node_ip" ] || { echo "cluster: no global IPv4 address on this machine (set CLUSTER_NODE_IP)" >&2; exit 1; }
server=https://$node_ip:6443
make_pki "$node_ip"
for who in admin controller-manager scheduler training-operator kwok; do
  kubeconfig "$state/$who.kubeconfig" "$who" "" "$server"
done
kubeconfig "$state/user.kubeconfig" user kctl-e2e "$server"
cp "$state/admin.kubeconfig" "$state/kubeconfig"
export KUBECONFIG=$state/admin.kubeconfig
curl_api() { curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$server$1"; }

say "etcd"
mkdir -p "$state/etcd"
start etcd etcd --name kctl-train --data-dir "$state/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster kctl-train=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
  --quota-backend-bytes 2147483648 --unsafe-no-fsync
wait_for etcd 60 "healthy answer on 127.0.0.1:2379" curl -sf http://127.0.0.1:2379/health

say "kube-apiserver"
start kube-apiserver kube-apiserver --etcd-servers http://127.0.0.1:2379 \
  --advertise-address "$node_ip" --bind-address 0.0.0.0 --secure-port 6443 \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --service-cluster-ip-range 10.0.0.0/24 \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --kubelet-preferred-address-types InternalIP,Hostname \
  --enable-aggregator-routing=true --allow-privileged=true --profiling=false
wait_for kube-apiserver 120 "ready answer on $server/readyz" curl_api /readyz
# The API server reaches kubelets (logs, exec) as this user: the kubelet asks RBAC.
kubectl create clusterrolebinding kube-apiserver-kubelet-client --clusterrole system:kubelet-api-admin \
  --user kube-apiserver-kubelet-client --dry-run=client -o yaml | kubectl apply --server-side -f - \
  >>"$logs/manifests.log" 2>&1 || fail manifests "binding the API server's kubelet client failed"

say "kube-controller-manager, kube-scheduler"
start kube-controller-manager kube-controller-manager \
  --kubeconfig "$state/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$state/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$state/controller-manager.kubeconfig" \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --use-service-account-credentials=true --leader-elect=false \
  --bind-address 127.0.0.1 --secure-port 10257 --controllers '*'
start kube-scheduler kube-scheduler --kubeconfig "$state/scheduler.kubeconfig" \
  --authentication-kubeconfig "$state/scheduler.kubeconfig" \
  --authorization-kubeconfig "$state/scheduler.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port 10259
wait_for kube-controller-manager 60 "healthy answer on 127.0.0.1:10257" curl -skf https://127.0.0.1:10257/healthz
wait_for kube-scheduler 60 "healthy answer on 127.0.0.1:10259" curl -skf https://127.0.0.1:10259/healthz

say "training-operator (CRDs, RBAC, webhook)"
operator_dir=$(cd "$here/go/training-operator" && go list -m -f '{{.Dir}}' github.com/kubeflow/training-operator)
[ -d "$operator_dir/manifests/base" ] || fail training-operator "its manifests are not in the module cache ($operator_dir)"
mkdir -p "$state/manifests/training-operator"
# kustomize takes only relative paths to a base.
operator_base=$(realpath --relative-to "$state/manifests/training-operator" "$operator_dir/manifests/overlays/standalone")
# Upstream's standalone overlay, read from the module cache, with the operator as a host
# process: no Deployment, and the webhook Service's endpoint is this machine.
cat > "$state/manifests/training-operator/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $operator_base
  - endpoints.yaml
patches:
  - target: {kind: Deployment, name: training-operator}
    patch: |
      \$patch: delete
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: training-operator}
  - target: {kind: Service, name: training-operator}
    patch: |
      - {op: remove, path: /spec/selector}
YAML
cat > "$state/manifests/training-operator/endpoints.yaml" <<YAML
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: training-operator-host
  namespace: kubeflow
  labels: {kubernetes.io/service-name: training-operator}
addressType: IPv4
endpoints:
  - addresses: ["$node_ip"]
ports:
  - {name: webhook-server, port: 9443, protocol: TCP}
  - {name: monitoring-port, port: 18080, protocol: TCP}
YAML
kubectl apply --server-side --force-conflicts -k "$state/manifests/training-operator" \
  >"$logs/manifests.log" 2>&1 || fail manifests "kubectl apply of the training-operator's manifests failed"
kubectl wait --for condition=established --timeout 60s crd/pytorchjobs.kubeflow.org >/dev/null \
  || fail manifests "the PyTorchJob CRD was not established"
# controller-runtime's webhook server and the cert rotator both use
# /tmp/k8s-webhook-server/serving-certs: the operator gets a private tmpfs there, and a loop
# beside it writes the certificate its rotator keeps in the Secret (a kubelet would mount it).
mkdir -p /tmp/k8s-webhook-server
start training-operator unshare --mount --propagation private env \
  KUBECONFIG="$state/training-operator.kubeconfig" MY_POD_NAMESPACE=kubeflow ADMIN="$state/admin.kubeconfig" \
  INIT_TEMPLATE="$here/init-pytorch.yaml" INIT_IMAGE="$trainer_image" \
  bash -c '
    set -e
    mount -t tmpfs -o size=1m,mode=0700 tmpfs /tmp/k8s-webhook-server
    mkdir -p /tmp/k8s-webhook-server/serving-certs
    ( cd /tmp/k8s-webhook-server/serving-certs
      # Each second until the rotator has written the Secret, then each minute (rotation).
      while if [ -s tls.key ]; then sleep 60; else sleep 1; fi; do
        for key in tls.crt tls.key; do
          value=$(kubectl --kubeconfig "$ADMIN" -n kubeflow get secret training-operator-webhook-cert \
            -o "jsonpath={.data.${key//./\\.}}" 2>/dev/null || true)
          [ -n "$value" ] && echo "$value" | base64 -d > "$key.new" && mv "$key.new" "$key"
        done
      done ) &
    exec training-operator --metrics-bind-address 127.0.0.1:18080 \
      --health-probe-bind-address 127.0.0.1:18081 --webhook-server-port 9443 \
      --enable-scheme pytorchjob --pytorch-init-container-template-file "$INIT_TEMPLATE" \
      --pytorch-init-container-image "$INIT_IMAGE"'
wait_for training-operator 120 "ready answer on 127.0.0.1:18081/readyz (webhook certificate served)" \
  curl -sf http://127.0.0.1:18081/readyz
probe_job() {
  kubectl apply --dry-run=server -f - <<YAML
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: webhook-probe, namespace: default}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: "kctl-train/probe:1"}]
YAML
}
wait_for training-operator 60 "answer from its validating webhook (a server-side dry run of a PyTorchJob)" probe_job

say "simulated GPU node pools (kwok)"
kwok_dir=$(cd "$here/go/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
# kwok's own fast stages (nodes Ready with a lease heartbeat; pods Ready, Job pods complete).
kubectl kustomize "$kwok_dir/kustomize/stage/fast" >"$state/kwok-stages.yaml" 2>>"$logs/manifests.log" \
  || fail manifests "kubectl kustomize of kwok's stages ($kwok_dir/kustomize/stage/fast) failed"
start kwok kwok --config "$state/kwok-stages.yaml" --kubeconfig "$state/kwok.kubeconfig" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --cidr 10.244.0.0/16 --node-ip 10.243.0.1 --server-address 127.0.0.1:10247
kubectl apply --server-side --force-conflicts -f "$here/nodes.yaml" -f "$here/platform.yaml" \
  >>"$logs/manifests.log" 2>&1 || fail manifests "kubectl apply of cluster/nodes.yaml or cluster/platform.yaml failed"
wait_for kwok 60 "Ready simulated nodes" kubectl wait --for condition=Ready --timeout 20s node -l type=kwok
for ns in kctl-e2e kctl-e2e-quota kctl-e2e-hpc; do
  kubectl apply --server-side --force-conflicts -n "$ns" -k "$root/manifests/rbac" \
    >>"$logs/manifests.log" 2>&1 || fail manifests "kubectl apply of manifests/rbac into $ns failed"
done

start_node
# The S3 store as examples/kind-cpu.yaml names it: a headless Service whose endpoint is moto.
kubectl apply --server-side --force-conflicts -f - >>"$logs/manifests.log" 2>&1 <<YAML || fail manifests "the minio Service for moto"
apiVersion: v1
kind: Namespace
metadata: {name: minio}
---
apiVersion: v1
kind: Service
metadata: {name: minio, namespace: minio}
spec:
  clusterIP: None
  ports: [{name: s3, port: 9000, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: minio-host
  namespace: minio
  labels: {kubernetes.io/service-name: minio}
addressType: IPv4
endpoints: [{addresses: ["$node_ip"]}]
ports: [{name: s3, port: 9000, protocol: TCP}]
YAML

say "cluster ready in $((SECONDS - begun)) s: KUBECONFIG=$state/kubeconfig (admin), $state/user.kubeconfig (user)"

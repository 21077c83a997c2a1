#!/usr/bin/env bash
# make cluster: a Kubernetes control plane, the training-operator, JobSet and Kubeflow Trainer,
# a real node and simulated GPU node pools, from upstream's own Go modules, as host processes
# (no Docker). Idempotent: what runs is left running; a second call only checks. Writes .cluster/kubeconfig (admin) and
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
for who in admin controller-manager scheduler kwok; do
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
# Upstream's standalone overlay, with the operator as a host process.
host_overlay "$state/manifests/training-operator" kubeflow training-operator training-operator \
  "[{name: webhook-server, port: 9443, protocol: TCP}, {name: monitoring-port, port: 18080, protocol: TCP}]" \
  "" "$operator_dir/manifests/overlays/standalone"
kubectl apply --server-side --force-conflicts -k "$state/manifests/training-operator" \
  >"$logs/manifests.log" 2>&1 || fail manifests "kubectl apply of the training-operator's manifests failed"
kubectl wait --for condition=established --timeout 60s crd/pytorchjobs.kubeflow.org >/dev/null \
  || fail manifests "the PyTorchJob CRD was not established"
start_webhook_controller training-operator kubeflow training-operator training-operator-webhook-cert \
  env MY_POD_NAMESPACE=kubeflow training-operator --metrics-bind-address 127.0.0.1:18080 \
  --health-probe-bind-address 127.0.0.1:18081 --webhook-server-port 9443 \
  --enable-scheme pytorchjob --pytorch-init-container-template-file "$here/init-pytorch.yaml" \
  --pytorch-init-container-image "$trainer_image"
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

say "JobSet (CRDs, RBAC, webhooks)"
jobset_dir=$(cd "$here/go/jobset" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)
[ -d "$jobset_dir/config/default" ] || fail jobset-controller-manager "its manifests are not in the module cache ($jobset_dir)"
host_overlay "$state/manifests/jobset" jobset-system jobset-controller-manager jobset-webhook-service \
  "[{port: 9445, protocol: TCP}]" "" "$jobset_dir/config/default"
kubectl apply --server-side --force-conflicts -k "$state/manifests/jobset" \
  >>"$logs/manifests.log" 2>&1 || fail manifests "kubectl apply of JobSet's manifests failed"
kubectl wait --for condition=established --timeout 60s crd/jobsets.jobset.x-k8s.io >/dev/null \
  || fail manifests "the JobSet CRD was not established"
# Upstream's configuration file, with this machine's ports and no leader election.
{ sed 's/leaderElect: true/leaderElect: false/' "$jobset_dir/config/components/manager/controller_manager_config.yaml"
  printf 'webhook: {port: 9445}\nmetrics: {bindAddress: "127.0.0.1:18085"}\nhealth: {healthProbeBindAddress: "127.0.0.1:18086"}\n'
} > "$state/jobset-config.yaml"
start_webhook_controller jobset-controller-manager jobset-system jobset-controller-manager \
  jobset-webhook-server-cert \
  jobset-controller-manager --config "$state/jobset-config.yaml"
wait_for jobset-controller-manager 120 "ready answer on 127.0.0.1:18086/readyz (webhook certificate served)" \
  curl -sf http://127.0.0.1:18086/readyz
probe_jobset() {
  kubectl apply --dry-run=server -f - <<YAML
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: webhook-probe, namespace: default}
spec:
  replicatedJobs:
    - name: probe
      template:
        spec:
          template:
            spec:
              restartPolicy: Never
              containers: [{name: probe, image: "kctl-train/probe:1"}]
YAML
}
wait_for jobset-controller-manager 60 "answer from its webhooks (a server-side dry run of a JobSet)" probe_jobset

say "Kubeflow Trainer (CRDs, RBAC, webhooks, Kubeflow's runtimes, kctl-train's runtime)"
trainer_dir=$(cd "$here/go/trainer" && go list -m -f '{{.Dir}}' github.com/kubeflow/trainer/v2)
[ -d "$trainer_dir/manifests/base" ] || fail trainer-controller-manager "its manifests are not in the module cache ($trainer_dir)"
# Upstream's overlays/manager without its JobSet (installed above, from JobSet's own module).
mkdir -p "$state/manifests/trainer"
printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: kubeflow-system}\n' > "$state/manifests/trainer/namespace.yaml"
host_overlay "$state/manifests/trainer" kubeflow-system kubeflow-trainer-controller-manager \
  kubeflow-trainer-controller-manager "[{name: webhook-server, port: 9444, protocol: TCP}]" \
  "namespace: kubeflow-system
secretGenerator:
  - {name: kubeflow-trainer-webhook-cert, namespace: kubeflow-system, options: {disableNameSuffixHash: true}}
configMapGenerator:
  - {name: kubeflow-trainer-public, literals: [kubeflow_trainer_version=v2.3.0], options: {disableNameSuffixHash: true}}" \
  namespace.yaml "$trainer_dir"/manifests/base/{crds,manager,rbac,webhook}
kubectl apply --server-side --force-conflicts -k "$state/manifests/trainer" \
  >>"$logs/manifests.log" 2>&1 || fail manifests "kubectl apply of Kubeflow Trainer's manifests failed"
kubectl wait --for condition=established --timeout 60s crd/trainjobs.trainer.kubeflow.org \
  crd/clustertrainingruntimes.trainer.kubeflow.org >/dev/null \
  || fail manifests "the TrainJob and ClusterTrainingRuntime CRDs were not established"
# Upstream's configuration file, with this machine's ports and no leader election.
sed -e 's/leaderElect: true/leaderElect: false/' -e 's/healthProbeBindAddress: :8081/healthProbeBindAddress: "127.0.0.1:18083"/' \
  -e 's/bindAddress: :8443/bindAddress: "127.0.0.1:18082"/' -e 's/port: 9443/port: 9444/' -e 's/port: 10443/port: 18084/' \
  "$trainer_dir/manifests/base/manager/controller_manager_config.yaml" > "$state/trainer-config.yaml"
start_webhook_controller trainer-controller-manager kubeflow-system \
  kubeflow-trainer-controller-manager kubeflow-trainer-webhook-cert \
  trainer-controller-manager --config "$state/trainer-config.yaml"
wait_for trainer-controller-manager 120 "ready answer on 127.0.0.1:18083/readyz (webhook certificate served)" \
  curl -sf http://127.0.0.1:18083/readyz
# Kubeflow's runtimes as upstream's overlay installs them, and kctl-train's own: both go
# through Trainer's validating webhook (upstream's skip it by their label).
kctl_runtime=$root/manifests/trainer-v2/cluster-training-runtime.yaml
wait_for trainer-controller-manager 60 "answer from its webhooks (a server-side dry run of kctl-train's runtime)" \
  kubectl apply --server-side --dry-run=server -f "$kctl_runtime"
kubectl apply --server-side --force-conflicts -f "$kctl_runtime" >>"$logs/manifests.log" 2>&1 \
  || fail manifests "kubectl apply of kctl-train's ClusterTrainingRuntime ($kctl_runtime) failed"
kubectl apply --server-side --force-conflicts -k "$trainer_dir/manifests/overlays/runtimes" \
  >>"$logs/manifests.log" 2>&1 || fail manifests "kubectl apply of Kubeflow's runtimes ($trainer_dir/manifests/overlays/runtimes) failed"

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

# Sourced by up.sh: the real node. containerd (with runc and Debian's CNI plugins) runs the
# pods the kubelet is given; CoreDNS answers the cluster's names; moto is the S3 store the
# pods reach as minio.minio.svc.cluster.local:9000. Images cannot be pulled (no registry is
# reachable): the pause image is built here, the trainer image is `make image`'s, imported.
node_name=kctl-node
pause_image=localhost/kctl-train/pause:3.10
trainer_image=docker.io/kctl-train/trainer:e2e   # examples/kind-cpu.yaml's image
ctr_sock=$state/containerd/containerd.sock

node_host() {  # what the kubelet needs of this machine: forwarding, bridges, inotify, mounts
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 \
    net.bridge.bridge-nf-call-ip6tables=1 fs.inotify.max_user_instances=8192 \
    fs.inotify.max_user_watches=524288
  mount --make-rshared /
}

containerd_config() {
  mkdir -p "$state/containerd" "$state/cni/net.d" "$state/cni/ipam"
  cat > "$state/containerd/config.toml" <<TOML
version = 3
root = "$state/containerd/root"
state = "$state/containerd/state"
[grpc]
  address = "$ctr_sock"
[ttrpc]
  address = "$ctr_sock.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$pause_image'
[plugins.'io.containerd.cri.v1.runtime']
  # This machine's root lacks CAP_SYS_RESOURCE: no process may lower its oom_score_adj (the
  # pause container asks for -998), so scores are kept at containerd's own or above.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '$bin/runc'
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = '$state/cni/net.d'
TOML
  # A bridge of its own (podman's and buildah's use 10.88/16), masquerading pods' traffic.
  cat > "$state/cni/net.d/10-kctl-train.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "kctl-train", "plugins": [
  {"type": "bridge", "bridge": "kctl0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$state/cni/ipam",
            "ranges": [[{"subnet": "10.89.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
JSON
}

# A buildah image streamed into containerd as REF: no archive file, and the layer blobs are
# dropped once unpacked (only the snapshot is kept). A copy of the ~6 GB trainer image
# fewer at the peak and two fewer afterwards: a shared CI disk filled up importing it.
import_image() {  # IMAGE REF (lib.sh's pipefail makes a failed push fail the import)
  buildah push --quiet "$1" "docker-archive:/dev/stdout:$2" \
    | ctr --address "$ctr_sock" -n k8s.io images import --local --discard-unpacked-layers - >/dev/null
}

import_images() {
  local ctr=(ctr --address "$ctr_sock" -n k8s.io)
  if ! "${ctr[@]}" images check "name==$pause_image" 2>/dev/null | grep -q "$pause_image"; then
    # Kubernetes' own pause program (in the module), static, alone in an image.
    local k8s_dir pause_dir
    k8s_dir=$(cd "$here/go/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
    pause_dir=$(mktemp -d)
    gcc -Os -static -o "$pause_dir/pause" "$k8s_dir/build/pause/linux/pause.c" \
      || fail node "gcc could not build the pause program"
    local c
    c=$(buildah from scratch)
    buildah copy "$c" "$pause_dir/pause" /pause >/dev/null
    buildah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
    buildah commit --quiet "$c" "$pause_image" >/dev/null
    buildah rm "$c" >/dev/null
    rm -rf "$pause_dir"
    import_image "$pause_image" "$pause_image" || fail node "ctr could not import the pause image"
    buildah rmi "$pause_image" >/dev/null  # containerd keeps it; the next one would be a dangling copy
  fi
  # The trainer image, when `make image` built one: imported again only when it changed.
  local built
  built=$(buildah inspect --type image --format '{{.FromImageID}}' localhost/kctl-train/trainer:dev 2>/dev/null || true)
  if [ -n "$built" ] && [ "$(cat "$state/containerd/trainer.id" 2>/dev/null)" != "$built" ]; then
    say "importing the trainer image into containerd"
    import_image localhost/kctl-train/trainer:dev "$trainer_image" \
      || fail node "the trainer image could not be imported into containerd: it needs ~11 GB free under $state while unpacking, $(df -h --output=avail "$state" | tail -1 | tr -d ' ') is free now"
    echo "$built" > "$state/containerd/trainer.id"
  fi
}

kubelet_config() {
  mkdir -p "$state/kubelet"
  serving_cert kubelet "$node_name" "IP:$node_ip,DNS:$node_name"
  client_cert node "system:node:$node_name" system:nodes
  kubeconfig "$state/node.kubeconfig" node "" "$server"
  cat > "$state/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$pki/kubelet.crt"
tlsPrivateKeyFile: "$pki/kubelet.key"
containerRuntimeEndpoint: "unix://$ctr_sock"
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: ["$node_ip"]
clusterDomain: cluster.local
resolvConf: "$state/kubelet/resolv.conf"
# Imported images can never be pulled back: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
serializeImagePulls: false
oomScoreAdj: 0   # its default, -999, needs CAP_SYS_RESOURCE (see containerd's config)
YAML
  # Pods with dnsPolicy Default get no outside resolver: there is no network to resolve on.
  echo "nameserver $node_ip" > "$state/kubelet/resolv.conf"
}

start_node() {
  say "node: containerd, kubelet, CoreDNS, moto"
  node_host
  containerd_config
  start containerd containerd --config "$state/containerd/config.toml"
  wait_for containerd 60 "an answer on $ctr_sock" ctr --address "$ctr_sock" version
  import_images
  kubelet_config
  start kubelet kubelet --config "$state/kubelet/config.yaml" --kubeconfig "$state/node.kubeconfig" \
    --root-dir "$state/kubelet/root" --node-ip "$node_ip" --hostname-override "$node_name"
  cat > "$state/Corefile" <<COREFILE
.:53 {
  bind $node_ip
  errors
  ready 127.0.0.1:18181
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig $state/admin.kubeconfig
    pods insecure
    fallthrough in-addr.arpa ip6.arpa
  }
  cache 5
}
COREFILE
  start coredns coredns -conf "$state/Corefile"
  wait_for coredns 60 "ready answer on 127.0.0.1:18181" curl -sf http://127.0.0.1:18181/ready
  if [ -x "$root/.venv/bin/moto_server" ]; then
    start moto "$root/.venv/bin/moto_server" -H 0.0.0.0 -p 9000
    wait_for moto 60 "an answer on :9000" curl -sf "http://127.0.0.1:9000/moto-api/"
  fi
  wait_for kubelet 120 "node $node_name Ready" \
    kubectl wait --for condition=Ready --timeout 10s "node/$node_name"
}

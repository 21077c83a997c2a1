#!/usr/bin/env bash
# make cluster-down: stops every process make cluster started (by its pid file, controllers
# first) and removes the cluster's state; the built binaries in .cluster/bin are kept.
source "$(dirname "$0")/lib.sh"
[ -d "$state" ] || { echo "cluster: nothing to stop ($state does not exist)"; exit 0; }
for component in moto coredns kubelet kwok training-operator kube-scheduler \
    kube-controller-manager kube-apiserver; do
  if running "$component"; then
    say "stopping $component"
  fi
  stop "$component"
done
# The pods' shims live in sessions of their own: stopped by the socket they serve.
ctr_sock=$state/containerd/containerd.sock
pkill -TERM -f "containerd-shim-runc-v2 .*-address $ctr_sock" 2>/dev/null || true
stop containerd
stop etcd
# What the kubelet and containerd mounted under the state directory, deepest first.
awk -v state="$state/" 'index($2, state) == 1 {print $2}' /proc/mounts | sort -r | xargs -r umount -l
ip link del kctl0 2>/dev/null || true
rm -rf "$state/etcd" "$state/containerd" "$state/kubelet" "$state/cni" "$pki" "$logs" "$run" \
  "$state/manifests" "$state"/*.kubeconfig "$state/kubeconfig" "$state/Corefile" "$state"/*.yaml
say "cluster stopped; state removed (binaries kept in $bin)"

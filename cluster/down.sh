#!/usr/bin/env bash
# make cluster-down: stops every process make cluster started (by its pid file, controllers
# first) and removes the cluster's state. Kept: the built binaries (.cluster/bin) and the
# images imported into containerd (an image cannot be pulled back here, and importing the
# trainer image again would take most of the next start).
source "$(dirname "$0")/lib.sh"
[ -d "$state" ] || { echo "cluster: nothing to stop ($state does not exist)"; exit 0; }
for component in moto coredns kubelet kwok trainer-controller-manager jobset-controller-manager \
    training-operator kube-scheduler \
    kube-controller-manager kube-apiserver; do
  if running "$component"; then
    say "stopping $component"
  fi
  stop "$component"
done
# The pods go, their images stay: every container of the CRI's namespace is killed and
# removed (with its snapshot) while containerd still runs; the shims, in sessions of their
# own, are stopped by the socket they serve.
ctr_sock=$state/containerd/containerd.sock
if running containerd; then
  ctr=(ctr --address "$ctr_sock" -n k8s.io)
  for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
    "${ctr[@]}" tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
    "${ctr[@]}" tasks delete -f "$task" >/dev/null 2>&1 || true
  done
  for container in $("${ctr[@]}" containers ls -q 2>/dev/null); do
    "${ctr[@]}" containers rm "$container" >/dev/null 2>&1 || true
  done
fi
pkill -TERM -f "containerd-shim-runc-v2 .*-address $ctr_sock" 2>/dev/null || true
stop containerd
stop etcd
# What the kubelet and containerd mounted under the state directory, deepest first.
awk -v state="$state/" 'index($2, state) == 1 {print $2}' /proc/mounts | sort -r | xargs -r umount -l
ip link del kctl0 2>/dev/null || true
rm -rf "$state/etcd" "$state/containerd/state" "$state/kubelet" "$state/cni" "$pki" "$logs" "$run" \
  "$state/manifests" "$state"/*.kubeconfig "$state/kubeconfig" "$state/Corefile" "$state"/*.yaml
say "cluster stopped; state removed (kept: binaries in $bin, images in $state/containerd/root)"

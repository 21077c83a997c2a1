#!/usr/bin/env bash
# make cluster-down: stops every process make cluster started (by its pid file, controllers
# first) and removes the cluster's state; the built binaries in .cluster/bin are kept.
source "$(dirname "$0")/lib.sh"
[ -d "$state" ] || { echo "cluster: nothing to stop ($state does not exist)"; exit 0; }
for component in kwok training-operator kube-scheduler kube-controller-manager kube-apiserver etcd; do
  if running "$component"; then
    say "stopping $component"
  fi
  stop "$component"
done
rm -rf "$state/etcd" "$pki" "$logs" "$run" "$state/manifests" "$state"/*.kubeconfig "$state/kubeconfig"
say "cluster stopped; state removed (binaries kept in $bin)"

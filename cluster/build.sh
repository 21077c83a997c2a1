#!/usr/bin/env bash
# Builds the cluster's components from their Go modules into .cluster/bin (what is already
# built for the same go.mod is kept; the Go build cache makes a rebuild after a change quick).
# Each module's go.mod and go.sum live under cluster/go/; sources come from the module proxy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
bin=${CLUSTER_DIR:-$root/.cluster}/bin
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS=${GOFLAGS:--mod=readonly}

k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go/kubernetes/go.mod")
k8s_minor=$(echo "$k8s_version" | cut -d. -f2)
# Without these every binary calls itself v0.0.0-master, and kubectl and the kubelet compare
# versions with the API server.
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$k8s_minor"

# module directory, package, binary name, ldflags, go build flags
build() {
  local module=$1 package=$2 name=$3 ldflags=${4:--s -w} flags=${5:-}
  local stamp="$bin/.$name.stamp" want
  want=$(cat "$here/go/$module"/go.* "$0" | sha256sum | cut -c1-16)
  if [ -x "$bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  local started=$SECONDS
  echo "building $name ($package)"
  # shellcheck disable=SC2086 # flags: words
  if ! (cd "$here/go/$module" && go build -trimpath $flags -ldflags "$ldflags" -o "$bin/$name.new" "$package"); then
    echo "build of $name failed: go build $package in cluster/go/$module" >&2
    return 1
  fi
  mv "$bin/$name.new" "$bin/$name"
  echo "$want" > "$stamp"
  echo "built $name in $((SECONDS - started)) s"
}

build etcd go.etcd.io/etcd/server/v3 etcd
for component in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
  build kubernetes "k8s.io/kubernetes/cmd/$component" "$component" "$k8s_ldflags"
done
build kwok sigs.k8s.io/kwok/cmd/kwok kwok
build training-operator github.com/kubeflow/training-operator/cmd/training-operator.v1 training-operator
build trainer github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager trainer-controller-manager
build jobset sigs.k8s.io/jobset jobset-controller-manager
for component in containerd ctr containerd-shim-runc-v2; do
  build containerd "github.com/containerd/containerd/v2/cmd/$component" "$component"
done
# runc alone needs cgo: libseccomp, for the RuntimeDefault seccomp profile pods ask for.
CGO_ENABLED=1 build runc github.com/opencontainers/runc runc "-s -w" "-tags seccomp"
build coredns github.com/coredns/coredns coredns

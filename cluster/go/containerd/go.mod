// Builds containerd, its runc shim and ctr (the real node's container runtime).
module kctl-train.local/cluster/containerd

go 1.26.6

require github.com/containerd/containerd/v2 v2.4.2

// Builds kwok, which runs the simulated GPU nodes.
module kctl-train.local/cluster/kwok

go 1.26.0

require sigs.k8s.io/kwok v0.8.0

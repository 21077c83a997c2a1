// Builds CoreDNS, which answers the cluster's DNS names (a job's <name>-master-0) to pods.
module kctl-train.local/cluster/coredns

go 1.26.0

require github.com/coredns/coredns v1.14.1

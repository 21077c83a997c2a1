// Builds runc (with cgo and libseccomp: RuntimeDefault seccomp profiles need it).
module kctl-train.local/cluster/runc

go 1.26.0

require github.com/opencontainers/runc v1.5.3

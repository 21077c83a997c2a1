// Builds etcd's server. Its go.mod replaces etcd's sibling modules with ../ paths, which a
// dependent cannot use: they are pinned here to the same release.
module kctl-train.local/cluster/etcd

go 1.26.0

require go.etcd.io/etcd/server/v3 v3.6.17

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.17
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 v3.6.17
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 v3.6.17
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 v3.6.17
)

// Builds Kubeflow's training-operator v1 (PyTorchJob). The v1.9 tags live in kubeflow/trainer's
// history but keep this module path; its manifests are read from this module's cache directory.
module kctl-train.local/cluster/training-operator

go 1.26.0

require github.com/kubeflow/training-operator v1.9.4

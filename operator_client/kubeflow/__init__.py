"""Facts about Kubeflow's training-operator (v1.9.4) that the renderer and backends share."""

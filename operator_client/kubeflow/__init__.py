"""API facts about Kubeflow's training-operator (v1.9.4) and Trainer v2: kinds, names, the
webhook's rules, object shapes, runtime files. What the controllers do with them is in
controlplane/."""

"""Pod sandboxes: the local backend's replicas run as pods would, where this machine allows
(root, Linux namespaces). support.py decides, network.py wires the pods' network,
podspec.py says what each pod is, shim.py builds and starts it, relay.py and cgroups.py
give it its store and its memory limit. docs/LOCAL_PODS.md describes the whole."""

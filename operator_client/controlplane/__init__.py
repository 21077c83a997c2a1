"""What the control plane does with a job's manifest, as pure rules: the training-operator's
and Trainer's workload groups (workload.py, trainjob_pods.py with JobSet and the Job
controller's part), the env they inject (operator_env.py), the pods they create
(pod_manifests.py), what admission refuses of a pod (pod_validation.py, pod_security.py),
what the kubelet gives a container (pod_env.py) and the job's state machine (lifecycle.py).

kubeflow/ holds the API facts these rules read (kinds, names, the webhook, runtime files);
the backends apply the rules: the local one runs what they say, the Kubernetes one reads
what the real controllers did.
"""

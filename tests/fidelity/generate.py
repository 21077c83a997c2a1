"""Generated corpus inputs (gen-tj-*, gen-pj-*): TrainJobs with their own runtimes and
PyTorchJobs drawn by hypothesis over the fields the controllers read — resources, numNodes,
numProcPerNode, env (value, valueFrom of each source) and envFrom, ports, volumes and their
mounts, runtime patches, elastic policies, restart policies, suspend, managedBy, the dataset
initializer, podGroupPolicy, names. Mostly what a cluster admits, sometimes not (a reserved
PET_ variable, a GPU request without a limit): the refusals are part of the corpus.

    python -m tests.fidelity.generate    # rewrites tests/fidelity/inputs/gen-*.yaml

Derandomized: the same hypothesis version draws the same inputs. The inputs are committed
with their goldens, so a new hypothesis only matters when they are generated again.
"""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from .corpus import INPUTS, NAMESPACE, NOT_RUN_MARK

IMAGE = "kctl-train/probe:1"
TRAINJOBS, PYTORCHJOBS = 26, 18
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"

ENV_NAMES = ["A", "MODE", "NCCL_DEBUG", "LOG_LEVEL", "X_1", "PET_NNODES", "WORLD_SIZE"]
FIELD_PATHS = [
    "metadata.name",
    "metadata.namespace",
    "status.podIP",
    "spec.nodeName",
    "metadata.labels['jobset.sigs.k8s.io/jobset-name']",
    "metadata.labels['training.kubeflow.org/replica-index']",
]


# Rare choices: hypothesis favours a strategy's first element and its bounds, so a one in
# twelve chance is a list of mostly the common case, that first.
RARELY = st.sampled_from([False] * 9 + [True])
FLAGS = st.sampled_from(["none"] * 9 + ["suspend", "multikueue", "managed"])


def _source() -> st.SearchStrategy[dict[str, Any]]:
    optional = st.booleans()
    return st.one_of(
        st.builds(lambda p: {"fieldRef": {"fieldPath": p}}, st.sampled_from(FIELD_PATHS)),
        st.builds(
            lambda r: {"resourceFieldRef": {"resource": r}},
            st.sampled_from(["limits.cpu", "requests.memory", "limits.memory"]),
        ),
        st.builds(
            lambda o: {"configMapKeyRef": {"name": "fid-config", "key": "mode", "optional": o}},
            optional,
        ),
        st.builds(
            lambda o: {"secretKeyRef": {"name": "fid-secret", "key": "token", "optional": o}},
            optional,
        ),
    )


def _env_entry(name: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda v: {"name": name, "value": v}, st.sampled_from(["1", "INFO", "", "a b"])),
        st.builds(lambda s: {"name": name, "valueFrom": s}, _source()),
    )


ENV = st.lists(st.sampled_from(ENV_NAMES), unique=True, max_size=3).flatmap(
    lambda names: st.tuples(*(_env_entry(n) for n in names)).map(list)
)
ENV_FROM = st.lists(
    st.sampled_from(
        [
            {"configMapRef": {"name": "fid-config", "optional": True}},
            {"secretRef": {"name": "fid-secret", "optional": True}},
            {"prefix": "APP_", "configMapRef": {"name": "fid-config", "optional": True}},
        ]
    ),
    unique_by=lambda e: str(e),
    max_size=2,
)
QUANTITIES = {
    "cpu": st.sampled_from(["250m", "1", "2", "3500m"]),
    "memory": st.sampled_from(["256Mi", "1Gi", "2G"]),
    "nvidia.com/gpu": st.sampled_from([1, 2, 8]),
}
RESOURCE_LIST = st.fixed_dictionaries({}, optional=QUANTITIES)
RESOURCES = st.fixed_dictionaries({}, optional={"requests": RESOURCE_LIST, "limits": RESOURCE_LIST})
PORTS = st.lists(
    st.tuples(st.sampled_from([8080, 29500, 29400, 23456]), st.sampled_from([None, "http", "m"])),
    unique_by=(lambda p: p[0], lambda p: p[1] or str(p[0])),
    max_size=2,
).map(lambda ports: [{"containerPort": n} | ({"name": name} if name else {}) for n, name in ports])
VOLUMES = st.lists(
    st.sampled_from(
        [
            ("scratch", {"emptyDir": {"sizeLimit": "1Gi"}}),
            ("shm", {"emptyDir": {"medium": "Memory"}}),
            ("config", {"configMap": {"name": "fid-config", "optional": True}}),
            ("token", {"secret": {"secretName": "fid-secret", "optional": True}}),
        ]
    ),
    unique_by=lambda v: v[0],
    max_size=2,
)


def _mounted(volumes: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """The pod's volumes and the container's mounts of them."""
    pod = [{"name": n, **source} for n, source in volumes]
    mounts = [{"name": n, "mountPath": f"/mnt/{n}"} for n, _ in volumes]
    return pod, mounts


def _container(name: str, draw: Any, *, env: bool = True) -> tuple[dict[str, Any], list[Any]]:
    """A container of `name` with drawn resources, env, ports and mounts; and its volumes."""
    container: dict[str, Any] = {"name": name, "image": IMAGE, "command": ["true"]}
    resources = draw(RESOURCES)
    if resources:
        container["resources"] = resources
    if env:
        container["env"] = draw(ENV) or None
        container["envFrom"] = draw(ENV_FROM) or None
    container["ports"] = draw(PORTS) or None
    volumes, mounts = _mounted(draw(VOLUMES))
    container["volumeMounts"] = mounts or None
    return {k: v for k, v in container.items() if v is not None}, volumes


def _job(name: str, step: str | None, pod_spec: dict[str, Any], **job: Any) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {**job, "template": {"spec": pod_spec}}}
    if step:
        template["metadata"] = {"labels": {ANCESTOR: step}}
    return {"name": name, "template": template}


@st.composite
def trainjob(draw: Any, index: int) -> tuple[str, list[dict[str, Any]], list[str]]:
    """A TrainJob and its runtime (or Kubeflow's torch-distributed), and what it probes."""
    name = f"gen-tj-{index:02d}-" + draw(st.from_regex(r"[a-z][a-z0-9]{0,14}", fullmatch=True))
    probes: list[str] = []
    spec: dict[str, Any] = {}
    trainer: dict[str, Any] = {"image": IMAGE, "command": ["true"]}
    docs: list[dict[str, Any]] = []
    has_dataset = False
    if draw(st.booleans()):
        spec["runtimeRef"] = {"name": "torch-distributed"}
    else:
        rt = f"fid-gen-tj-{index:02d}"
        spec["runtimeRef"] = {"name": rt}
        node, volumes = _container("node", draw)
        pod: dict[str, Any] = {"containers": [node]}
        if volumes:
            pod["volumes"] = volumes
        jobs = []
        has_dataset = draw(st.booleans())
        if has_dataset:
            init: dict[str, Any] = {
                "containers": [
                    {
                        "name": "dataset-initializer",
                        "image": IMAGE,
                        "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}],
                    }
                ],
                "volumes": [{"name": "initializer", "emptyDir": {}}],
            }
            jobs.append(_job("dataset-initializer", "dataset-initializer", init))
        node_job = _job("node", "trainer", pod)
        if has_dataset:
            node_job["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
        jobs.append(node_job)
        if draw(st.booleans()):
            helper, helper_volumes = _container("helper", draw)
            helper_pod = {
                "containers": [helper],
                **({"volumes": helper_volumes} if helper_volumes else {}),
            }
            jobs.append(_job("helper", None, helper_pod, parallelism=draw(st.integers(1, 2))))
        ml = draw(
            st.sampled_from(
                [None, {}, {"numNodes": 2}, {"torch": {}}, {"numNodes": 3, "torch": {}}]
            )
        )
        runtime: dict[str, Any] = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": rt},
            "spec": {"template": {"spec": {"replicatedJobs": jobs}}},
        }
        if ml is not None:
            runtime["spec"]["mlPolicy"] = ml
        if draw(RARELY):
            runtime["spec"]["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 30}}
            probes.append("podGroupPolicy")
        docs.append(runtime)
    numbers = {"numNodes": st.integers(0, 3), "numProcPerNode": st.integers(1, 4)}
    trainer |= draw(st.fixed_dictionaries({}, optional=numbers))
    resources = draw(st.none() | RESOURCES)
    if resources is not None:
        trainer["resourcesPerNode"] = resources
    env = draw(ENV)
    if env:
        trainer["env"] = env
    spec["trainer"] = trainer
    if has_dataset and draw(st.booleans()):
        dataset: dict[str, Any] = {"storageUri": "hf://fidelity/data"}
        dataset |= draw(
            st.fixed_dictionaries(
                {}, optional={"env": ENV, "secretRef": st.just({"name": "fid-hf-token"})}
            )
        )
        spec["initializer"] = {"dataset": dataset}
    if draw(st.booleans()):
        _, mounts = _mounted(draw(VOLUMES))
        patch_pod: dict[str, Any] = {
            "metadata": {"labels": {"fidelity/patched": "yes"}},
            "spec": {
                "nodeSelector": {"pool": draw(st.sampled_from(["a", "b"]))},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        }
        if mounts:
            patch_pod["spec"]["volumes"] = [{"name": m["name"], "emptyDir": {}} for m in mounts]
            patch_pod["spec"]["containers"] = [{"name": "node", "volumeMounts": mounts}]
        spec["runtimePatches"] = [
            {
                "manager": "example.com/fidelity",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {"name": "node", "template": {"spec": {"template": patch_pod}}}
                            ]
                        }
                    }
                },
            }
        ]
    flag = draw(FLAGS)
    if flag == "suspend":
        spec["suspend"] = True
        probes.insert(0, "suspend: true")  # what a local run looks at first
    elif flag == "multikueue":
        spec["managedBy"] = "kueue.x-k8s.io/multikueue"
        probes.insert(0, "spec.managedBy kueue.x-k8s.io/multikueue")
    elif flag == "managed":
        spec["managedBy"] = "trainer.kubeflow.org/trainjob-controller"
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }
    return name, [job, *docs], probes


REPLICA = {"Master": st.just(1), "Worker": st.integers(1, 3)}
RESTART = st.sampled_from(["OnFailure", "Never", "ExitCode", "Always"])


@st.composite
def pytorchjob(draw: Any, index: int) -> tuple[str, list[dict[str, Any]], list[str]]:
    """A PyTorchJob, and what it probes."""
    name = f"gen-pj-{index:02d}-" + draw(st.from_regex(r"[a-z][a-z0-9]{0,14}", fullmatch=True))
    probes: list[str] = []
    types = draw(st.sampled_from([["Master"], ["Worker"], ["Master", "Worker"]]))
    replicas: dict[str, Any] = {}
    for rtype in types:
        container, volumes = _container("pytorch", draw)
        pod: dict[str, Any] = {"containers": [container]}
        if volumes:
            pod["volumes"] = volumes
        template: dict[str, Any] = {"spec": pod}
        if draw(st.booleans()):
            template["metadata"] = {"labels": {"team": "fidelity"}, "annotations": {"note": rtype}}
        replicas[rtype] = {
            "replicas": draw(REPLICA[rtype]),
            "restartPolicy": draw(RESTART),
            "template": template,
        }
    spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas}
    if "Worker" in types and draw(st.booleans()):
        elastic: dict[str, Any] = {"rdzvBackend": "c10d"}
        elastic |= draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "minReplicas": st.integers(1, 2),
                    "maxReplicas": st.integers(2, 4),
                    "maxRestarts": st.integers(0, 3),
                    "rdzvPort": st.sampled_from([29400, 29500]),
                },
            )
        )
        spec["elasticPolicy"] = elastic
    nproc = draw(st.sampled_from([None, "auto", "1", "2"]))
    if nproc is not None:
        spec["nprocPerNode"] = nproc
    run_policy = draw(st.fixed_dictionaries({}, optional={"backoffLimit": st.integers(0, 4)}))
    flag = draw(FLAGS)
    if flag == "suspend":
        run_policy["suspend"] = True
        probes.append("suspend: true")
    elif flag == "multikueue":
        run_policy["managedBy"] = "kueue.x-k8s.io/multikueue"
        probes.append("spec.runPolicy.managedBy kueue.x-k8s.io/multikueue")
    if run_policy:
        spec["runPolicy"] = run_policy
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }
    return name, [job], probes


def _drawn(strategy: Any, count: int) -> list[tuple[str, list[dict[str, Any]], list[str]]]:
    """`count` examples of `strategy(index)`, derandomized."""
    found: list[tuple[str, list[dict[str, Any]], list[str]]] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        if len(found) < count:
            found.append(data.draw(strategy(len(found))))

    collect()
    return found


def write_inputs() -> None:
    """Rewrite every gen-* input."""
    for old in INPUTS.glob("gen-*.yaml"):
        old.unlink()
    drawn = _drawn(trainjob, TRAINJOBS) + _drawn(pytorchjob, PYTORCHJOBS)
    for name, docs, probes in drawn:
        header = "# generated by tests/fidelity/generate.py (hypothesis, derandomized)\n"
        if probes:
            header += f"{NOT_RUN_MARK} {probes[0]}\n"
        text = yaml.safe_dump_all(docs, sort_keys=False)
        (INPUTS / f"{name}.yaml").write_text(header + text)


if __name__ == "__main__":
    write_inputs()

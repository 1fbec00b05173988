"""KAI's ConfigMap names for a fractional pod's GPU env (shoal.core.ingest.gpu_env): the names admission writes
into the container's env are the names the binder fills and the node agent adds to."""

from __future__ import annotations

from shoal.core.ingest import gpu_env


def pod(annotations=None, containers=("main",), inits=(), name="p"):
    return {"metadata": {"name": name, "namespace": "ns", "annotations": annotations or {}},
            "spec": {"containers": [{"name": c} for c in containers],
                     "initContainers": [{"name": c} for c in inits]}}


def test_container_suffix_follows_the_named_container():
    assert gpu_env.container_suffix(pod()) == "0"
    assert gpu_env.container_suffix(pod({"gpu-fraction-container-name": "b"}, containers=("a", "b"))) == "1"
    assert gpu_env.container_suffix(pod({"gpu-fraction-container-name": "w"}, inits=("x", "w"))) == "i1"
    assert gpu_env.container_suffix(pod({"gpu-fraction-container-name": "nope"})) == "0"


def test_names_from_the_stored_prefix_or_the_pod_name():
    stored = pod({"runai/shared-gpu-configmap": "job-abcdefg-shared-gpu"})
    assert gpu_env.capabilities_name(stored) == "job-abcdefg-shared-gpu-0"
    assert gpu_env.evar_name(stored) == "job-abcdefg-shared-gpu-0-evar"
    assert gpu_env.capabilities_name(pod(name="solo")) == "solo-shared-gpu-0"


def test_env_patch_names_what_the_binder_fills():
    p = pod({"gpu-fraction": "0.5"}, containers=("a", "b"))
    p["metadata"]["annotations"]["gpu-fraction-container-name"] = "b"
    ops = gpu_env.env_patch(p, "xxxxxxx")
    prefix = next(op["value"] for op in ops if op["path"].endswith("shared-gpu-configmap"))
    p["metadata"]["annotations"]["runai/shared-gpu-configmap"] = prefix
    env = next(op for op in ops if op["path"] == "/spec/containers/1/env")["value"]
    assert {e["valueFrom"]["configMapKeyRef"]["name"] for e in env} == {gpu_env.capabilities_name(p)}
    env_from = next(op for op in ops if op["path"] == "/spec/containers/1/envFrom")["value"]
    assert env_from == [{"configMapRef": {"name": gpu_env.evar_name(p)}}]


def test_env_patch_of_a_pod_without_containers_is_empty():
    assert gpu_env.env_patch({"metadata": {}, "spec": {}}, "xxxxxxx") == []
    assert gpu_env.env_patch({"spec": {"containers": [None]}}, "xxxxxxx") == []

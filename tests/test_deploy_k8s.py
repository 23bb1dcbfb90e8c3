"""The Kubernetes manifests in deploy/k8s: valid against the Kubernetes schemas (bundled with
kubernetes-validate, so offline), consistent with each other, and carrying an aifs.toml that
aifs accepts with the secret file where the pods find it."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from aifs.cli.mount_cmd import EXIT_TIMEOUT_S
from aifs.config import load_config
from aifs.rdma.auth import new_secret_text

K8S = Path(__file__).resolve().parents[1] / "deploy" / "k8s"
# The oldest and the newest Kubernetes the bundled schemas cover.
VERSIONS = ("1.25.0", "1.37.0")
NODE_IP = "10.0.0.7"


def load_manifests(root: Path) -> list[tuple[str, dict]]:
    """(file:index, object) of every YAML document under `root`."""
    found = []
    for path in sorted(root.rglob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                found.append((f"{path.relative_to(root)}:{i}", doc))
    return found


def schema_errors(root: Path, version: str) -> list[str]:
    """One line per manifest the schemas refuse; strict, so a misspelt field is refused too."""
    errors = []
    for where, doc in load_manifests(root):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{where}: {'.'.join(map(str, e.path))}: {e.message}")
    return errors


def find(kind: str, name: str) -> dict:
    matches = [doc for _, doc in load_manifests(K8S) if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"{len(matches)} {kind} named {name} in {K8S}"
    return matches[0]


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"] if "template" in workload["spec"] else workload["spec"]


def container(workload: dict) -> dict:
    (only,) = pod_spec(workload)["containers"]
    return only


def mounted(workload: dict, volume_name: str) -> tuple[dict, dict]:
    """(the pod's volume, the container's mount of it)."""
    (volume,) = [v for v in pod_spec(workload)["volumes"] if v["name"] == volume_name]
    (mount,) = [m for m in container(workload)["volumeMounts"] if m["name"] == volume_name]
    return volume, mount


def env(workload: dict, name: str) -> dict:
    (entry,) = [e for e in container(workload)["env"] if e["name"] == name]
    return entry


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid(version):
    kinds = {doc["kind"] for _, doc in load_manifests(K8S)}
    assert {"Namespace", "ConfigMap", "Secret", "Service", "StatefulSet", "DaemonSet", "Pod"} <= kinds
    assert schema_errors(K8S, version) == []


@pytest.mark.parametrize("good, bad", [
    ("mountPropagation: Bidirectional", "mountPropogation: Bidirectional"),
    ("terminationGracePeriodSeconds: 180", "terminationGracePeriodSeconds: three minutes"),
    ("type: CharDevice", "type: [CharDevice]"),
])
def test_an_invalid_manifest_is_refused(tmp_path, good, bad):
    text = (K8S / "30-mount.yaml").read_text()
    assert good in text
    (tmp_path / "30-mount.yaml").write_text(text.replace(good, bad))
    (error,) = schema_errors(tmp_path, VERSIONS[-1])
    assert error.startswith("30-mount.yaml:0: spec.template.spec")


def test_config_passes_aifs_validation_with_the_secret_where_the_mount_finds_it(tmp_path):
    """The ConfigMap's TOML as the mount pod renders it, its secret paths moved into tmp_path
    where files like the ones the Secret volume projects (same names, same mode) are made."""
    daemonset = find("DaemonSet", "aifs-mount")
    secret_volume, secret_mount = mounted(daemonset, "secret")
    projected = tmp_path / "secret"
    projected.mkdir()
    secret_keys = find("Secret", "aifs-secrets")["stringData"]
    for item in secret_volume["secret"]["items"]:
        assert item["key"] in secret_keys
        (projected / item["path"]).write_text(new_secret_text())
        (projected / item["path"]).chmod(secret_volume["secret"]["defaultMode"])
    toml = find("ConfigMap", "aifs-config")["data"]["aifs.toml"]
    rendered = toml.replace("${NODE_IP}", NODE_IP)
    assert "${" not in rendered
    (tmp_path / "aifs.toml").write_text(rendered.replace(secret_mount["mountPath"] + "/", f"{projected}/"))

    config = load_config(tmp_path / "aifs.toml")

    remote = next(tier for tier in config.tiers if tier.kind == "remote")
    assert remote.secret_file.parent == config.cluster.secret_file.parent == projected
    assert config.cluster.advertised_host == NODE_IP
    assert config.metrics.listen.startswith(f"{NODE_IP}:")
    assert env(daemonset, "NODE_IP")["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env(daemonset, key)["valueFrom"]["secretKeyRef"]["key"] in secret_keys


def test_remote_tier_lists_every_flash_server_by_its_stable_name(tmp_path):
    flash, service = find("StatefulSet", "aifs-flash"), find("Service", "aifs-flash")
    namespace, port = flash["metadata"]["namespace"], service["spec"]["ports"][0]["port"]
    names = [f"aifs-flash-{i}.{flash['spec']['serviceName']}.{namespace}.svc.cluster.local:{port}"
             for i in range(flash["spec"]["replicas"])]
    toml = find("ConfigMap", "aifs-config")["data"]["aifs.toml"]
    assert [name for name in names if f'"{name}"' not in toml] == []
    args = container(flash)["args"]
    assert f"--listen=0.0.0.0:{port}" in args
    secret_volume, secret_mount = mounted(flash, "secret")
    assert f"--secret-file={secret_mount['mountPath']}/{secret_volume['secret']['items'][0]['path']}" in args
    assert secret_volume["secret"]["defaultMode"] & 0o077 == 0


def test_mount_reaches_the_node_and_the_training_pod():
    daemonset, training = find("DaemonSet", "aifs-mount"), find("Pod", "train-example")
    spec, mount = pod_spec(daemonset), container(daemonset)
    assert mount["securityContext"]["privileged"]
    fuse_volume, fuse_mount = mounted(daemonset, "fuse")
    assert fuse_volume["hostPath"]["path"] == fuse_mount["mountPath"] == "/dev/fuse"
    node_dir, in_mount_pod = mounted(daemonset, "mnt")
    assert in_mount_pod["mountPropagation"] == "Bidirectional"
    mountpoint = env(daemonset, "MOUNTPOINT")["value"]
    assert mountpoint.startswith(in_mount_pod["mountPath"] + "/")
    node_path = node_dir["hostPath"]["path"] + mountpoint[len(in_mount_pod["mountPath"]):]
    assert mount["lifecycle"]["preStop"]["exec"]["command"][-1] == 'aifs umount "$MOUNTPOINT"'
    assert spec["terminationGracePeriodSeconds"] > EXIT_TIMEOUT_S
    training_dir, in_training_pod = mounted(training, "aifs")
    assert training_dir["hostPath"]["path"] == node_dir["hostPath"]["path"]
    assert in_training_pod["mountPropagation"] == "HostToContainer"
    assert node_path.replace(training_dir["hostPath"]["path"], in_training_pod["mountPath"], 1) \
        in container(training)["args"][0]


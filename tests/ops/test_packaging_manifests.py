"""Static checks of the RPM spec and the Kubernetes DaemonSet:
each parsed by the tool or library that reads it, and held to the same contract as the
systemd unit (paths, user, listen port, read-only host access)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path, PurePosixPath

import pytest

from agentd.config import load_config

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "packaging" / "rpm" / "agentd.spec"
DAEMONSET = REPO / "packaging" / "k8s" / "daemonset.yaml"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


# --- RPM -------------------------------------------------------------------------


@pytest.mark.proc
@pytest.mark.skipif(shutil.which("rpmspec") is None, reason="rpmspec not installed (Debian package: rpm)")
def test_rpm_spec_parses_with_the_project_version() -> None:
    proc = subprocess.run(["rpmspec", "-P", str(SPEC)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    q = subprocess.run(["rpmspec", "-q", "--qf", "%{name} %{version}\n", str(SPEC)], capture_output=True, text=True)
    assert q.returncode == 0, q.stderr
    assert q.stdout.split() == ["agentd", VERSION]
    parsed = proc.stdout
    # Same layout as the deb and the unit's ExecStart.
    files = parsed.split("\n%files\n", 1)[1].split("\n%changelog", 1)[0].splitlines()
    assert "/usr/bin/agentd" in files and "/usr/sbin/agentd-healthcheck" in files
    assert "/usr/lib/systemd/system/agentd.service" in files
    assert "%config(noreplace) /etc/agentd/agentd.toml" in files
    assert "%dir %attr(0755,agentd,agentd) /etc/nccl" in files
    # The private library directory, as in the deb (never /opt: FHS, rpmlint, lintian).
    assert "/usr/lib/agentd" in files
    assert "/opt/" not in parsed
    # Dependencies only from the hash-locked file, agentd itself without resolving again.
    assert re.search(r"pip install [^\n]*--require-hashes[^\n]*--only-binary :all:", parsed)
    assert "-r packaging/requirements.lock" in parsed
    assert re.search(r"pip install --no-compile --no-deps\b", parsed)
    assert "install -D -m 0644 systemd/agentd.service" in parsed
    for script in ("%pre", "%post", "%preun", "%postun"):
        assert re.search(rf"^{script}$", parsed, re.M), script


# --- Kubernetes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed (test extra)")
    loaded = [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]
    by_kind = {d["kind"]: d for d in loaded}
    assert len(by_kind) == len(loaded)
    return by_kind


def _container(docs: dict[str, dict]) -> dict:
    (c,) = docs["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    return c


def test_objects_and_namespace(docs: dict[str, dict]) -> None:
    assert set(docs) == {"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"}
    ns = docs["Namespace"]["metadata"]["name"]
    for kind in ("ServiceAccount", "ConfigMap", "DaemonSet"):
        assert docs[kind]["metadata"]["namespace"] == ns
    ds = docs["DaemonSet"]
    assert ds["apiVersion"] == "apps/v1"
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_pod_runs_in_the_node_network_with_probes(docs: dict[str, dict]) -> None:
    pod = docs["DaemonSet"]["spec"]["template"]
    spec = pod["spec"]
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["nodeSelector"] and spec["tolerations"]
    c = _container(docs)
    env = {e["name"]: e["value"] for e in c["env"]}
    port = int(env["AGENTD_LISTEN"].rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["metrics"] == port
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"]["port"] in ("metrics", port) and probe["timeoutSeconds"] >= 1
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == port
    assert ann["prometheus.io/path"] == "/metrics"
    # Never takes a GPU from workloads: devices come from the NVIDIA runtime.
    for section in c["resources"].values():
        assert not any(k.startswith("nvidia.com/") for k in section)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "memory" in c["resources"]["limits"]


def test_environment_is_a_valid_agentd_config(docs: dict[str, dict], tmp_path: Path) -> None:
    env = {e["name"]: e["value"] for e in _container(docs)["env"] if e["name"].startswith("AGENTD_")}
    config_file = tmp_path / "agentd.toml"
    config_file.write_text(docs["ConfigMap"]["data"]["agentd.toml"])
    cfg = load_config(config_file, environ=env)
    assert str(cfg.host_root) == "/host"
    assert cfg.paths.nfd_features is not None


def _mounts(docs: dict[str, dict]) -> dict[str, dict]:
    return {m["mountPath"]: m for m in _container(docs)["volumeMounts"]}


def test_host_access_read_only_except_written_paths(docs: dict[str, dict]) -> None:
    spec = docs["DaemonSet"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = _mounts(docs)
    for path, host in (("/host/sys", "/sys"), ("/host/proc", "/proc")):
        assert mounts[path]["readOnly"] is True
        assert volumes[mounts[path]["name"]]["hostPath"]["path"] == host
    env = {e["name"]: e["value"] for e in _container(docs)["env"]}
    written = [v for k, v in env.items() if k.startswith("AGENTD_PATHS__")]
    writable = [p for p, m in mounts.items() if not m.get("readOnly")]
    for target in written:
        parents = PurePosixPath(target).parents
        owner = [w for w in writable if PurePosixPath(w) == PurePosixPath(target) or PurePosixPath(w) in parents]
        assert owner, f"{target} is not on a writable mount"
    # Each writable host directory is handed to the agent's uid by the init container.
    (init,) = spec["initContainers"]
    chowned = init["command"][2:]
    host_writable = [p for p in writable if "hostPath" in volumes[mounts[p]["name"]]]
    init_mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert sorted(chowned) == sorted(init_mounts[mounts[p]["name"]] for p in host_writable)
    assert init["command"][1] == f'{_container(docs)["securityContext"]["runAsUser"]}:{_container(docs)["securityContext"]["runAsGroup"]}'
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    # Every mount names a volume, every volume is used.
    used = {m["name"] for m in _container(docs)["volumeMounts"]} | set(init_mounts)
    assert used == set(volumes)


def test_container_is_unprivileged(docs: dict[str, dict]) -> None:
    sc = _container(docs)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
    assert docs["DaemonSet"]["spec"]["template"]["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert docs["DaemonSet"]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


# --- shell scripts ---------------------------------------------------------------

SCRIPTS = [
    REPO / "packaging" / "deb" / name for name in ("build.sh", "postinst", "prerm", "postrm")
] + [REPO / "packaging" / "slurm" / "agentd-healthcheck"]


@pytest.mark.proc
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_are_posix_sh(script: Path) -> None:
    assert script.read_text().startswith("#!/bin/sh\n")
    assert script.stat().st_mode & 0o111, f"{script} is not executable"
    shell = shutil.which("dash") or "/bin/sh"
    proc = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

"""The chart's kernelLog modes (issue 42, red-team finding 11): the narrowest container that
can read /dev/kmsg. What the kernel asks (printk.c devkmsg_open -> check_syslog_permissions:
CAP_SYSLOG only where kernel.dmesg_restrict=1) and what the runtime asks (the device cgroup:
privileged, or a device the runtime injected) give four pods; each is rendered, validated
strictly, and holds exactly the privileges its mode needs."""

from __future__ import annotations

import helm_python
import kubernetes_validate
import pytest
import yaml

from tests.support.paths import REPO

pytestmark = pytest.mark.packaging

CHART = REPO / "packaging" / "helm" / "agentd"
KUBE_VERSIONS = ("1.25.0", "1.37.0")  # the chart's floor and the newest kubernetes-validate has
PLUGIN = "squat.ai/kmsg"


def _render(kernel_log: dict) -> dict:
    with helm_python.Chart.load(CHART) as chart:
        rendered = chart.render({"kernelLog": {"enabled": True, **kernel_log}}, name="agentd", namespace="gpu-monitoring")
    ds: dict = yaml.safe_load(rendered["agentd/templates/daemonset.yaml"])
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(ds, version, strict=True)
    return ds


def _agentd(ds: dict) -> dict:
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


def _kmsg_hostpath(ds: dict) -> bool:
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in _agentd(ds)["volumeMounts"]}
    if "/dev/kmsg" not in mounts:
        return False
    assert volumes[mounts["/dev/kmsg"]]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    return True


@pytest.mark.parametrize("access, restrict, uid, privileged, caps, hostpath", [
    # the narrowest: an ordinary unprivileged pod plus the one device
    ("device-plugin", False, 65532, False, {"drop": ["ALL"]}, False),
    ("device-plugin", True, 0, False, {"drop": ["ALL"], "add": ["SYSLOG"]}, False),
    # privileged but uid 65532: every device node by its file mode, no capability
    ("privileged", False, 65532, True, None, True),
    # privileged uid 0: root on the node; no capability list pretending otherwise
    ("privileged", True, 0, True, None, True),
])
def test_each_mode_holds_exactly_what_it_needs(access: str, restrict: bool, uid: int, privileged: bool, caps: dict | None, hostpath: bool) -> None:
    values: dict = {"access": access, "dmesgRestrict": restrict}
    if access == "device-plugin":
        values["resource"] = PLUGIN
    ds = _render(values)
    c = _agentd(ds)
    sc = c["securityContext"]
    assert sc["runAsUser"] == uid and sc["runAsNonRoot"] is (uid != 0) and sc["privileged"] is privileged
    assert sc.get("capabilities") == caps
    assert sc["readOnlyRootFilesystem"] is True
    assert sc.get("allowPrivilegeEscalation") is (None if privileged else False)
    assert _kmsg_hostpath(ds) is hostpath
    limits = c["resources"]["limits"]
    assert limits.get(PLUGIN) == (1 if access == "device-plugin" else None)
    assert limits["memory"] == "1Gi"  # the chart's own limits stay


def test_device_plugin_without_a_resource_is_refused() -> None:
    with pytest.raises(helm_python.HelmError, match="kernelLog.resource"):
        _render({"access": "device-plugin"})


def test_values_schema_takes_only_the_two_ways() -> None:
    with helm_python.Chart.load(CHART) as chart:
        chart.validate_schema({"kernelLog": {"enabled": True, "access": "device-plugin", "resource": PLUGIN, "dmesgRestrict": False}})
        for bad in ({"kernelLog": {"access": "hostpath"}}, {"kernelLog": {"resource": "kmsg"}}, {"kernelLog": {"dmesgRestrict": "1"}}):
            with pytest.raises(helm_python.HelmValuesError):
                chart.validate_schema(bad)

"""derive_env policy and the nccl.env / nccl.conf renderings."""

import json
import shutil
import subprocess

import pytest

from agentd.judging.findings import NODE, netdev_subject, pci_subject, port_subject
from agentd.nccl.env import derive_env, render_env_conf, render_env_sh, sh_quote
from agentd.nccl.envfile import read_docker_env_file, read_nccl_conf, read_systemd_env_file
from tests.support.check_snapshots import with_port
from tests.support.nccl_snapshots import config, critical, ib_node, pcie_node, roce_node, roles_for, unvalidated_config, warning

ALL8 = "=" + ",".join(f"mlx5_{i}:1" for i in range(8))


def derive(snap, findings=(), topo_path=None, **nccl):
    cfg = config(**nccl)
    return derive_env(snap, list(findings), cfg, topo_path=topo_path, roles=roles_for(snap, cfg))


def test_ib_node_lists_exactly_the_compute_ports():
    env = derive(ib_node())
    assert env.get("NCCL_IB_HCA") == ALL8  # storage CX-6 Dx ports mlx5_8/9 are not compute
    assert env.var("NCCL_IB_HCA").provenance.startswith("measured: ACTIVE compute ports")
    assert env.problems == ()


def test_roce_and_pcie_nodes():
    assert derive(roce_node()).get("NCCL_IB_HCA") == ALL8
    assert derive(pcie_node()).get("NCCL_IB_HCA") == "=mlx5_0:1,mlx5_1:1"


def test_port_down_leaves_and_returns():
    snap = ib_node()
    down = with_port(snap, "mlx5_3", state="DOWN", phys_state="Polling")
    env = derive(down)
    assert env.get("NCCL_IB_HCA") == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1"
    assert "left out: mlx5_3:1 DOWN" in env.var("NCCL_IB_HCA").provenance
    assert derive(snap).get("NCCL_IB_HCA") == ALL8  # recovered on the next render


def test_critical_finding_removes_a_port_warning_does_not():
    snap = ib_node()
    env = derive(snap, [critical("ib.port.rate_degraded", port_subject("mlx5_5", 1))])
    assert "mlx5_5:1" not in env.get("NCCL_IB_HCA")
    assert "mlx5_5:1 critical ib.port.rate_degraded" in env.var("NCCL_IB_HCA").provenance
    assert derive(snap, [warning("ib.port.rate_degraded", port_subject("mlx5_5", 1))]).get("NCCL_IB_HCA") == ALL8


def test_critical_on_hca_pci_function_or_netdev_removes_its_ports():
    snap = roce_node()
    nic2 = snap.hca("mlx5_2").pci_bus_id
    env = derive(snap, [critical("pcie.link.downtrained", pci_subject(nic2)), critical("roce.ecn.disabled", netdev_subject("rdma6")),
                         critical("gdr.unavailable", NODE)])
    assert env.get("NCCL_IB_HCA") == "=mlx5_0:1,mlx5_1:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_7:1"


def test_wrong_link_layer_is_left_out():
    env = derive(with_port(pcie_node(), "mlx5_1", link_layer="OmniPath"))
    assert env.get("NCCL_IB_HCA") == "=mlx5_0:1"


def test_no_healthy_port_leaves_the_variable_out():
    snap = pcie_node()
    for name in ("mlx5_0", "mlx5_1"):
        snap = with_port(snap, name, state="DOWN")
    env = derive(snap)
    assert "NCCL_IB_HCA" not in env
    assert env.omitted[0].key == "NCCL_IB_HCA" and "sockets" in env.omitted[0].reason
    text = render_env_sh(env, generated_at=0, hostname="n")
    assert "# not set: NCCL_IB_HCA: no healthy compute port" in text and "export NCCL_IB_HCA" not in text


def test_node_without_rdma():
    env = derive(pcie_node().model_copy(update={"hcas": ()}))
    assert "NCCL_IB_HCA" not in env and "no compute RDMA device" in env.omitted[0].reason


def test_config_values_and_topo_file():
    env = derive(ib_node(), topo_path="/etc/nccl/topo.xml", socket_ifname="eth0", ib_tc=106, ib_sl=3, cross_nic=0, net_plugin="none")
    assert env.items() == (
        ("NCCL_IB_HCA", ALL8),
        ("NCCL_SOCKET_IFNAME", "=eth0"),
        ("NCCL_TOPO_FILE", "/etc/nccl/topo.xml"),
        ("NCCL_IB_TC", "106"),
        ("NCCL_IB_SL", "3"),
        ("NCCL_CROSS_NIC", "0"),
        ("NCCL_NET_PLUGIN", "none"),
    )
    assert env.var("NCCL_IB_TC").provenance == "config: nccl.ib_tc"
    assert env.notes == ()


def test_never_set_by_default():
    env = derive(roce_node(), topo_path="/x.xml", ib_tc=106)
    for key in ("NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL", "NCCL_ALGO", "NCCL_PROTO"):
        assert key not in env
    assert "NCCL_SOCKET_IFNAME" not in env  # only from config: the snapshot does not know routes
    text = render_env_sh(env, generated_at=0, hostname=None)
    assert "# not set by design: NCCL_IB_GID_INDEX, NCCL_NET_GDR_LEVEL, NCCL_ALGO, NCCL_PROTO" in text


def test_socket_ifname_notes_and_problems():
    env = derive(ib_node(), socket_ifname="ens9")
    assert env.get("NCCL_SOCKET_IFNAME") == "=ens9" and "not a network interface" in env.notes[0]
    env = derive(ib_node(), socket_ifname="eth0:1")
    assert "NCCL_SOCKET_IFNAME" not in env and "alias" in env.problems[0]


def test_overrides_then_profile_applied_last():
    env = derive(
        roce_node(),
        ib_tc=96,
        overrides={"NCCL_IB_TC": "106", "NCCL_IB_GID_INDEX": "3", "NCCL_DEBUG": "WARN"},
        profile="training",
        profiles={"training": {"NCCL_DEBUG": "INFO", "NCCL_NET_GDR_LEVEL": "PHB"}},
    )
    assert env.get("NCCL_IB_TC") == "106" and env.var("NCCL_IB_TC").source == "override"
    assert "replaces the config value" in env.var("NCCL_IB_TC").provenance
    assert env.get("NCCL_DEBUG") == "INFO" and env.var("NCCL_DEBUG").provenance.startswith("profile: nccl.profiles.training")
    assert env.get("NCCL_NET_GDR_LEVEL") == "PHB"
    assert any("2.21" in n for n in env.notes)  # GID index: allowed, but advised against
    assert env.problems == ()


BAD_OVERRIDES = {"NCCL_IB_HCA": "mlx5_1", "NCCL_NET_GDR_LEVEL": "NODE", "NCCL_IB_TC": "300"}
BAD_PROFILES = {"p": {"NCCL_IB_SL": "016", "nccl_lower": "1", "NCCL_ALGO": "Rings"}}


def test_bad_overrides_are_rejected_when_the_config_loads():
    with pytest.raises(Exception) as ei:
        config(overrides=BAD_OVERRIDES, profile="p", profiles=BAD_PROFILES)
    text = str(ei.value)
    assert "mlx5_10" in text and "NODE is nvidia-smi vocabulary" in text and "octal" in text


def test_bad_overrides_are_problems_with_clear_messages():
    # Defence in depth: a config that bypassed validation still never reaches a file.
    snap = ib_node()
    cfg = unvalidated_config(overrides=BAD_OVERRIDES, profile="p", profiles=BAD_PROFILES)
    env = derive_env(snap, [], cfg, topo_path=None, roles=roles_for(snap, cfg))
    text = "\n".join(env.problems)
    assert "nccl.overrides.NCCL_IB_HCA: NCCL_IB_HCA: without a leading '='" in text
    assert "mlx5_10" in text
    assert "NODE is nvidia-smi vocabulary" in text
    assert "300 is outside 0-255" in text
    assert "nccl.profiles.p.NCCL_IB_SL" in text and "octal" in text
    assert "'nccl_lower' is not an NCCL variable name" in text
    assert "unknown token 'Rings'" in text
    assert env.get("NCCL_IB_HCA") == ALL8  # a rejected override does not replace the measured value


def test_override_selecting_no_device_is_rejected():
    env = derive(ib_node(), overrides={"NCCL_IB_HCA": "=mlx4_0"})
    assert "sockets" in env.problems[0]


# ---------------------------------------------------------------------------
# renderings

def full_env():
    return derive(
        ib_node(),
        topo_path="/etc/nccl/topo.xml",
        socket_ifname="eth0",
        ib_tc=106,
        overrides={"NCCL_IB_HCA": "^=mlx5_8,mlx5_9", "NCCL_ALGO": "allreduce:tree;broadcast:ring", "NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p"},
    )


def test_sh_quote():
    assert sh_quote("106") == "106"
    assert sh_quote("/etc/nccl/topo.xml") == "/etc/nccl/topo.xml"
    assert sh_quote("=mlx5_0:1") == "'=mlx5_0:1'"
    assert sh_quote("^=a") == "'^=a'"
    assert sh_quote("it's") == "'it'\\''s'"


def test_env_sh_layout():
    env = full_env()
    text = render_env_sh(env, generated_at=1_760_000_000, hostname="gpu-ib-01")
    lines = text.splitlines()
    assert lines[0].startswith("# NCCL settings for this node, written by agentd")
    assert any(line.startswith("# generated: 2025-10-09T08:53:20Z by agentd") and "gpu-ib-01" in line for line in lines)
    assert "export NCCL_IB_HCA='^=mlx5_8,mlx5_9'" in lines
    assert "export NCCL_IB_TC=106" in lines
    idx = lines.index("export NCCL_IB_TC=106")
    assert lines[idx - 1] == "# config: nccl.ib_tc"
    assert text.endswith("\n") and "\r" not in text


@pytest.mark.proc
@pytest.mark.parametrize("shell", ["bash", "dash"])
def test_sourced_by_a_real_shell_child_sees_every_value(tmp_path, shell):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    env = full_env()
    path = tmp_path / "nccl.env"
    path.write_text(render_env_sh(env, generated_at=0, hostname="h"))
    script = f"set -e; . {path}; python3 -c 'import os,json; print(json.dumps({{k:v for k,v in os.environ.items() if k.startswith(\"NCCL_\")}}))'"
    out = subprocess.run([shell, "-c", script], capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"}, check=True)
    assert json.loads(out.stdout) == env.as_dict()


def test_conf_form_reads_the_same_everywhere():
    env = full_env()
    text = render_env_conf(env, generated_at=0, hostname="h")
    expected = env.as_dict()
    assert read_nccl_conf(text) == expected
    assert read_nccl_conf(text, skip_hash_lines=False) == expected
    assert read_systemd_env_file(text) == expected
    assert read_docker_env_file(text) == expected
    for line in text.splitlines():
        if line.startswith("#"):
            assert "=" not in line, line
        else:
            assert not line.startswith("export") and '"' not in line and "'" not in line
    assert "\r" not in text and text.endswith("\n")


def test_conf_renderer_refuses_unwritable_values():
    from agentd.nccl.envmodel import EnvVar, NcclEnv

    env = NcclEnv().with_var(EnvVar("NCCL_X", "a b", "override", "x"))
    with pytest.raises(ValueError, match="NCCL_X"):
        render_env_conf(env, generated_at=0, hostname=None)

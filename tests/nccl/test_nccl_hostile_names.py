"""Issue 12 item 9: an RDMA device whose name is NCCL list syntax never reaches an NCCL file."""

import pytest

from agentd.base.ids import plain_device_name
from agentd.nccl import render_all
from tests.support.check_snapshots import with_hca
from tests.support.nccl_snapshots import config, ib_node, roles_for

HOSTILE = ["mlx5_8:1,mlx5_9", "mlx5_3=", "^mlx5_3", "mlx5 3", "mlx5_3\n", "mlx5_\udcff3", "mlx5_é", "", "a/b"]


@pytest.mark.parametrize("name", HOSTILE)
def test_list_syntax_and_odd_names_are_not_plain(name):
    assert not plain_device_name(name)


@pytest.mark.parametrize("name", ["mlx5_0", "mlx5_bond_0", "rxe0", "irdma-ens1f0", "efa_0", "hfi1_0", "ionic_0", "qedr0", "bnxt_re.1"])
def test_real_kernel_names_are_plain(name):
    assert plain_device_name(name)


@pytest.mark.parametrize("name", ["mlx5_8:1,mlx5_9", "mlx5_9,mlx5_8", "^mlx5_9"])
def test_hca_named_with_nccl_list_syntax_never_reaches_an_nccl_file(name):
    snap = with_hca(ib_node(), "mlx5_3", name=name)
    cfg = config()
    roles = roles_for(snap, cfg)
    assert name in roles.compute  # the role logic still sees it as a compute HCA
    r = render_all(snap, [], cfg, roles)
    assert r.ok
    hca = r.env.get("NCCL_IB_HCA")
    assert hca == "=" + ",".join(f"mlx5_{i}:1" for i in range(8) if i != 3)
    for text in (r.env_sh, r.env_conf, r.topo_xml or ""):
        assert name not in text
    assert "not a plain device name" in r.env.var("NCCL_IB_HCA").provenance

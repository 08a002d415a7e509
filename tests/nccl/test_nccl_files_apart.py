"""Issue 12 item 8: each NCCL file is rendered and written on its own; a value that fails
validation costs the files that carry it (and a finding), never the others."""

from agentd.config import AgentConfig
from agentd.judging.outputs import output_findings
from agentd.outputs.evaluate import evaluate
from agentd.outputs.writer import FileKeeper
from tests.support.check_snapshots import with_port
from tests.support.nccl_snapshots import ib_node, unvalidated_config


def _config(tmp_path, **nccl):
    bad = unvalidated_config(write_conf=True, **nccl)
    paths = AgentConfig(paths={"nccl_env": str(tmp_path / "nccl.env"), "nccl_conf": str(tmp_path / "nccl.conf"),
                               "nccl_topo": str(tmp_path / "topo.xml")}).paths
    return bad.model_copy(update={"paths": paths})


def test_a_bad_override_costs_the_env_files_not_the_topology(tmp_path):
    keeper = FileKeeper()
    good = _config(tmp_path)
    first = {s.name: s for s in keeper.write(evaluate(ib_node(), [], good, None), good)}
    assert all(s.ok for s in first.values()) and set(first) == {"nccl.env", "nccl.conf", "topo.xml"}
    env_before = (tmp_path / "nccl.env").read_bytes()
    topo_before = (tmp_path / "topo.xml").read_bytes()

    # The node changes (a compute HCA loses its PCI function: the topology changes) while
    # the config carries a value NCCL would misread.
    snap = ib_node()
    snap = snap.model_copy(update={"hcas": tuple(h for h in snap.hcas if h.name != "mlx5_5")})
    snap = with_port(snap, "mlx5_3", state="DOWN")
    bad = _config(tmp_path, overrides={"NCCL_NET_GDR_LEVEL": "NODE"})
    ev = evaluate(snap, [], bad, None)
    assert any("NODE" in p for p in ev.nccl_problems)
    st = {s.name: s for s in keeper.write(ev, bad)}

    assert st["topo.xml"].ok and st["topo.xml"].changed
    assert (tmp_path / "topo.xml").read_bytes() != topo_before
    for name in ("nccl.env", "nccl.conf"):
        assert not st[name].ok and not st[name].changed and "NODE" in (st[name].error or "")
    assert (tmp_path / "nccl.env").read_bytes() == env_before
    codes = {(f.code, f.about.name) for f in output_findings(tuple(st.values()), ev.nccl_problems)}
    assert ("nccl.render.invalid", "nccl") in codes
    assert ("nccl.file.write_failed", "nccl.env") in codes and ("nccl.file.write_failed", "topo.xml") not in codes

"""Device names NCCL cannot be given (issue 12 items 1 and 9).

The kernel takes any byte in an RDMA device name (``rdma dev set mlx5_0 name ...``), NCCL
list syntax (``mlx5_8:1,mlx5_9``) and bytes that are not UTF-8 included. Such a name is
never written into an NCCL file (``agentd.nccl.env`` leaves the device out of
``NCCL_IB_HCA``), so a compute HCA with one is an HCA NCCL does not use: a warning that
names it (escaped, ``\\xNN`` for a byte that is not UTF-8), not silence.
"""

from __future__ import annotations

from agentd.base.escape import printable
from agentd.base.ids import plain_device_name
from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import finding, hca_subject
from agentd.model import Finding


def check_hca_names(inp: CheckInput) -> list[Finding]:
    """ib.hca.name_unusable: a compute HCA whose name is not a plain device name."""
    roles = inp.resolved_roles()
    out: list[Finding] = []
    for hca in inp.snapshot.hcas:
        if roles.is_compute(hca.name) and not plain_device_name(hca.name):
            out.append(
                finding(
                    "ib.hca.name_unusable",
                    "warning",
                    hca_subject(hca.name),
                    f"compute RDMA device {printable(hca.name)} has a name that is not a plain device name"
                    " (letters, digits, '_', '.', '+', '-'): it is left out of NCCL_IB_HCA, so NCCL does not use it",
                    "Find what renamed the device and give it a plain name (`rdma dev set <name> name mlx5_N`), "
                    "or list the compute HCAs in hca.compute.",
                    measured=printable(hca.name),
                )
            )
    return out

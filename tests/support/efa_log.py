"""AWS EFA admin-queue lines for the kernel log tests, made from the driver's format strings:
no published real line of them was found, so each is the format of
torvalds/linux drivers/infiniband/hw/efa/efa_com.c (the function named with it) filled in,
as ibdev_err_ratelimited prints it through __ibdev_printk (drivers/infiniband/core/device.c):
"<PCI driver> <function> <RDMA device>: ", the PCI driver "efa", the RDMA device named by
rdma-core's udev rule (rdmap<bus>s<slot>) as on the EFA layout of tests/fixtures/rdma-families.

Opcodes are efa_admin_cmds_defs.h's (CREATE_QP 1, GET_STATS 13); a timeout's ``status`` is
EFA_CMD_SUBMITTED (0) or EFA_CMD_COMPLETED (1); ``comp_status`` 1 is
EFA_ADMIN_RESOURCE_ALLOCATION_FAILURE; ``err`` -62 is -ETIME, -19 -ENODEV, -12 -ENOMEM.
"""

from __future__ import annotations

BDF = "0000:00:06.0"
_DEV = f"efa {BDF} rdmap0s6: "

# efa_com_wait_and_process_admin_cq_interrupts: "The device didn't send any completion for
# admin cmd %s(%d) status %d (ctx 0x%p, sq producer: %d, sq consumer: %d, cq consumer: %d)"
GET_STATS_TIMEOUT = _DEV + ("The device didn't send any completion for admin cmd GET_STATS(13) status 0 "
                            "(ctx 0x00000000b1e5a2c4, sq producer: 41, sq consumer: 40, cq consumer: 40)")
# the same function's other branch, with the "(id: %d, ..." tail of the 2025 patch "RDMA/efa:
# Extend admin timeout error print"
CREATE_QP_NO_MSIX = _DEV + ("The device sent a completion but the driver didn't receive any MSI-X interrupt for admin cmd "
                            "CREATE_QP(1) status 1 (id: 9, sq producer: 12, sq consumer: 11, cq consumer: 11)")
# efa_com_wait_and_process_admin_cq_polling
POLLING_TIMEOUT = _DEV + "Wait for completion (polling) timeout"
# efa_com_cmd_exec: "Failed to process command %s (opcode %u) comp_status %d err %d" (after the
# timeout above, and for a completion with an error status)
GET_STATS_FAILED = _DEV + "Failed to process command GET_STATS (opcode 13) comp_status 0 err -62"
CREATE_QP_FAILED = _DEV + "Failed to process command CREATE_QP (opcode 1) comp_status 1 err -12"
UNKNOWN_FAILED = _DEV + "Failed to process command unknown command opcode (opcode 99) comp_status 1 err -22"
# efa_com_cmd.c efa_com_get_stats, the caller's own line: "Failed to get stats type-%u scope-%u.%u [%d]"
GET_STATS_CALLER = _DEV + "Failed to get stats type-0 scope-1.0 [-62]"
# efa_com_submit_admin_cmd, then efa_com_cmd_exec: "Failed to submit command %s (opcode %u) err %ld"
QUEUE_CLOSED = _DEV + "Admin queue is closed"
GET_STATS_NOT_SUBMITTED = _DEV + "Failed to submit command GET_STATS (opcode 13) err -19"
# efa_com_handle_single_admin_completion
COMP_CTX_NULL = _DEV + "comp_ctx is NULL. Changing the admin queue running state"

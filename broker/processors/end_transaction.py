"""END_TRANSACTION (37): a producer commits or rolls back its half message (`broker.transaction`).

COMMIT (8) stores the message under its real topic, ROLLBACK (12) stores nothing visible; both
end the half. NOT_TYPE (0), "the state is still unknown", leaves the half for the check. Producers
send this request oneway, so the answer matters only to those that wait for it: SUCCESS, or
SYSTEM_ERROR with 4.9's remarks when the half named is not one (wrong offset, group or queue
offset). A half already ended is answered SUCCESS and not ended twice.
"""

from __future__ import annotations

import structlog

from broker.processors import RequestContext
from broker.transaction import EndError
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.transaction_headers import EndTransactionRequestHeader
from store.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE

log = structlog.get_logger()
_OUTCOMES = {TRANSACTION_COMMIT_TYPE: "commit", TRANSACTION_ROLLBACK_TYPE: "rollback"}


class EndTransactionProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
        outcome = _OUTCOMES.get(header.commit_or_rollback)
        if outcome is None:
            if header.commit_or_rollback == TRANSACTION_NOT_TYPE:
                return request.make_response(ResponseCode.SUCCESS)  # unknown yet: checked later
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"commitOrRollback {header.commit_or_rollback} is not 0, 8 or 12",
            )
        service = ctx.broker.transactions
        if service is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, "no transaction service")
        try:
            async with service.lock:
                half = await service.half(
                    header.commit_log_offset, header.tran_state_table_offset, header.producer_group
                )
                if service.ended(half):
                    return request.make_response(ResponseCode.SUCCESS, "already ended")
                if outcome == "commit":
                    await service.commit(half)
                else:
                    await service.mark_done(half)
        except EndError as exc:
            return request.make_response(exc.code, str(exc))
        log.info(
            "transaction_ended",
            outcome=outcome,
            group=header.producer_group,
            half_offset=header.tran_state_table_offset,
            from_check=header.from_transaction_check,
        )
        return request.make_response(ResponseCode.SUCCESS)

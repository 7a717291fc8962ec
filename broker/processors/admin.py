"""Admin requests of RocketMQ 4.9's `AdminBrokerProcessor` that the broker answers.

TRIGGER_DELETE_FILES (27), what `mqadmin deleteExpiredCommitLog` sends: the store runs a cleanup
round now, and its next rounds delete expired segments at any hour (see `store.cleanup`). With
ACL on it needs an admin account (`broker.acl.permission.ADMIN_CODES`).
"""

from __future__ import annotations

import structlog

from broker.processors import RequestContext
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand

log = structlog.get_logger()


class DeleteExpiredCommitLogProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        log.warning("delete_expired_commit_log_requested", remote=ctx.remote_text)
        ctx.broker.store.execute_delete_files_manually()
        return request.make_response(ResponseCode.SUCCESS)

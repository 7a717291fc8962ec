"""Request code -> processor for every connection: unknown codes and processor failures become
responses, and the inline requests of one receive go to their processor together."""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from broker.processors import InlineProcessor, RequestContext, RequestProcessor, Respond
from broker.refusals import RefusalLog
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError

log = structlog.get_logger()


class Dispatcher:
    """Request code -> processor; unknown codes and processor failures become responses.

    `refusals` is shared by the connections, which log every answer with an error code there.
    """

    def __init__(self, processors: Mapping[int, RequestProcessor]) -> None:
        self.processors = dict(processors)
        self.refusals = RefusalLog()
        #: the processors that can take a request without a task (`InlineProcessor`)
        self.inline: dict[int, InlineProcessor] = {
            code: processor
            for code, processor in self.processors.items()
            if isinstance(processor, InlineProcessor)
        }

    async def dispatch(
        self, request: RemotingCommand, ctx: RequestContext
    ) -> RemotingCommand | None:
        processor = self.processors.get(request.code)
        response: RemotingCommand | None
        if processor is None:
            response = request.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {request.code} not supported",
            )
        else:
            try:
                response = await processor.process(request, ctx)
            except HeaderFieldError as exc:
                response = request.make_response(exc.response_code, str(exc))
            except Exception as error:
                log.exception("processor_failed", code=RequestCode.name_of(request.code))
                return request.make_response(ResponseCode.SYSTEM_ERROR, str(error) or repr(error))
        return response

    def submit_burst(
        self, requests: list[RemotingCommand], ctx: RequestContext, respond: Respond
    ) -> list[RemotingCommand]:
        """Hand requests of one receive, each with an inline processor (`inline`), to their
        processors without a task, a run of requests for the same processor at a time; returns
        those that need `dispatch`. Every other request is answered through `respond` exactly
        once, later or before this returns."""
        declined: list[RemotingCommand] = []
        inline = self.inline
        start, count = 0, len(requests)
        while start < count:
            processor = inline[requests[start].code]
            end = start + 1
            while end < count and inline[requests[end].code] is processor:
                end += 1
            run = requests if (start, end) == (0, count) else requests[start:end]
            try:
                declined += processor.submit_burst(run, ctx, respond)
            except Exception as exc:
                # The processor raised before handing any of them on, so none is answered.
                log.exception("processor_failed", code=RequestCode.name_of(run[0].code))
                remark = str(exc) or repr(exc)
                for request in run:
                    respond(request, request.make_response(ResponseCode.SYSTEM_ERROR, remark))
            start = end
        return declined

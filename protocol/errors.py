"""Exceptions for bad input from a peer.

`RemotingProtocolError` is frame-level: the byte stream can no longer be trusted, so the broker
logs it and closes that connection without answering. `HeaderFieldError` is request-level: the
frame was fine but a header field or the body is not; the broker answers with
`.response_code` and the exception text as remark, and keeps the connection.
"""

from __future__ import annotations

from .codes import ResponseCode


class RemotingProtocolError(Exception):
    """The peer sent bytes that are not a valid remoting frame; the message says what was wrong.
    (`protocol.frame.FramesBeforeError` also carries the whole frames decoded before them.)"""


class HeaderFieldError(RemotingProtocolError):
    """A request's custom header field (or body) is missing or malformed.

    `field` names the wire field (`producerGroup`, `b`, `body`, ...); `response_code` is the code
    to answer with, `SYSTEM_ERROR` unless a more specific one applies.
    """

    def __init__(
        self, field: str, message: str, response_code: int = ResponseCode.SYSTEM_ERROR
    ) -> None:
        super().__init__(message)
        self.field = field
        self.response_code = int(response_code)

    @classmethod
    def missing(cls, field: str) -> HeaderFieldError:
        """The error for a required field that is absent (upstream's wording)."""
        return cls(field, f"the custom field {field} is null")


class BatchBodyError(HeaderFieldError):
    """A client-side batch body that cannot be split into messages (answered MESSAGE_ILLEGAL)."""

    def __init__(self, message: str) -> None:
        super().__init__("body", message, ResponseCode.MESSAGE_ILLEGAL)


class BodyDecompressionError(HeaderFieldError):
    """A message body flagged as compressed that does not decompress (answered MESSAGE_ILLEGAL)."""

    def __init__(self, message: str) -> None:
        super().__init__("body", message, ResponseCode.MESSAGE_ILLEGAL)

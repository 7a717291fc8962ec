"""RocketMQ 5's `Status` (a `Code` and a message) as responses carry it, and the one table that
turns the broker's remoting response codes into 5.x codes.

The Proxy maps only a handful of remoting codes and answers INTERNAL_SERVER_ERROR for the rest;
the broker answers 5.x clients itself, so each refusal it knows gets the 5.x code a client can
act on (a missing topic, no permission, a slave not there).
"""

from __future__ import annotations

from typing import Final

from broker.grpc.methods import Message
from protocol.codes import ResponseCode
from protocol.v2 import load

#: remoting response code -> the name of 5.x's `Code`
REMOTING_TO_V5: Final[dict[ResponseCode, str]] = {
    ResponseCode.SUCCESS: "OK",
    ResponseCode.SYSTEM_ERROR: "INTERNAL_SERVER_ERROR",
    ResponseCode.SYSTEM_BUSY: "TOO_MANY_REQUESTS",
    ResponseCode.FLOW_CONTROL: "TOO_MANY_REQUESTS",
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: "NOT_IMPLEMENTED",
    ResponseCode.FLUSH_DISK_TIMEOUT: "MASTER_PERSISTENCE_TIMEOUT",
    ResponseCode.SLAVE_NOT_AVAILABLE: "HA_NOT_AVAILABLE",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "SLAVE_PERSISTENCE_TIMEOUT",
    ResponseCode.MESSAGE_ILLEGAL: "BAD_REQUEST",
    ResponseCode.SERVICE_NOT_AVAILABLE: "INTERNAL_SERVER_ERROR",
    ResponseCode.VERSION_NOT_SUPPORTED: "VERSION_UNSUPPORTED",
    ResponseCode.NO_PERMISSION: "FORBIDDEN",
    ResponseCode.TOPIC_NOT_EXIST: "TOPIC_NOT_FOUND",
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: "ILLEGAL_FILTER_EXPRESSION",
    ResponseCode.SUBSCRIPTION_NOT_EXIST: "CONSUMER_GROUP_NOT_FOUND",
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: "CONSUMER_GROUP_NOT_FOUND",
    ResponseCode.INVALID_PARAMETER: "BAD_REQUEST",
    ResponseCode.TRANSACTION_FAILED: "INTERNAL_SERVER_ERROR",
    ResponseCode.CONSUMER_NOT_ONLINE: "NOT_FOUND",
}


def status(code: str, message: str = "") -> Message:
    """A `Status` with the 5.x `Code` named `code`; the message defaults to that name."""
    definition, _ = load()
    return definition.Status(code=definition.Code.Value(code), message=message or code)


def ok() -> Message:
    return status("OK")


def from_remoting(code: int, remark: str | None) -> Message:
    """The `Status` for a remoting answer: its 5.x code from the table, its remark as message."""
    try:
        name = REMOTING_TO_V5.get(ResponseCode(code), "INTERNAL_SERVER_ERROR")
    except ValueError:
        name = "INTERNAL_SERVER_ERROR"
    return status(name, remark or str(code))

"""`RemotingCommand`: one request or response, independent of how its header is serialized.

Mirrors RocketMQ's `RemotingCommand` (remoting/protocol/RemotingCommand.java). Codes and the
language stay plain ints so that values unknown to `codes.py` survive a decode/encode round trip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .codes import MQ_VERSION, LanguageCode, SerializeType

if TYPE_CHECKING:
    from .errors import HeaderFieldError

#: flag bit 0 (`RPC_TYPE`): the command is a response.
RESPONSE_FLAG = 1
#: flag bit 1 (`RPC_ONEWAY`): the requester wants no answer.
ONEWAY_FLAG = 2


@dataclass(slots=True)
class RemotingCommand:
    """A decoded frame. `body` is None when the frame carries no body bytes.

    `header_error` is set by the decoder for a request whose header has a field of the wrong
    type or range: it names the field. Such a command is only to be answered
    (`make_response(header_error.response_code, str(header_error))`), never processed: its
    opaque is the peer's, its code and flag are when they were valid, the rest are defaults.
    """

    code: int
    language: int = LanguageCode.JAVA
    version: int = MQ_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    serialize_type: SerializeType = SerializeType.JSON
    header_error: HeaderFieldError | None = field(default=None, compare=False)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
        *,
        opaque: int = 0,
        oneway: bool = False,
        serialize_type: SerializeType = SerializeType.JSON,
        language: int = LanguageCode.JAVA,
        version: int = MQ_VERSION,
    ) -> RemotingCommand:
        """A request; the caller (or `RequestMatcher.next_opaque`) chooses the opaque."""
        return cls(
            code,
            language,
            version,
            opaque,
            ONEWAY_FLAG if oneway else 0,
            None,
            {} if ext_fields is None else ext_fields,
            body,
            serialize_type,
        )

    def make_response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> RemotingCommand:
        """The answer to this request: same opaque and serialize type, response flag only."""
        return RemotingCommand(
            code,
            LanguageCode.JAVA,
            MQ_VERSION,
            self.opaque,
            RESPONSE_FLAG,
            remark,
            {} if ext_fields is None else ext_fields,
            body,
            self.serialize_type,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

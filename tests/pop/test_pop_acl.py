"""With ACL on, pop consumption needs what a pull needs: SUB on the topic and on the group (its
retry topic). Without the entries any signed account could pop, ack or hide any topic's
messages."""

from __future__ import annotations

import pytest

from broker.acl.permission import Permission
from broker.acl.resource import needed_permissions
from protocol.codes import RequestCode
from protocol.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
)

HEADERS = {
    RequestCode.POP_MESSAGE: PopMessageRequestHeader("g", "T", -1, 1, 60_000, 0, 0, 0),
    RequestCode.ACK_MESSAGE: AckMessageRequestHeader("g", "T", 0, "x", 0),
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: ChangeInvisibleTimeRequestHeader(
        "g", "T", 0, "x", 0, 60_000
    ),
}


@pytest.mark.parametrize("code", list(HEADERS))
def test_pop_codes_need_sub_on_the_topic_and_the_group(code: RequestCode) -> None:
    needed = needed_permissions(code, HEADERS[code].to_ext_fields(), None)
    assert needed == {"T": Permission.SUB, "%RETRY%g": Permission.SUB}

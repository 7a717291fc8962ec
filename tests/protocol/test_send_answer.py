"""A send's SUCCESS answer built from its pre-encoded start (`encode_json_send_answer`): byte
for byte the frame the generic encoder writes for the same response, whatever the region and
the variable fields; a region the shortcut cannot write as it is leaves it to the encoder."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.json_header import encode_json_send_answer, json_send_answer_prefix

_MSG_ID = st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32)


def generic(fixed: dict[str, str], opaque: int, msg_id: str, queue_id: int, offset: int) -> bytes:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {}, b"x", opaque=opaque)
    ext = dict(fixed)
    ext.update(msgId=msg_id, queueId=str(queue_id), queueOffset=str(offset))
    return encode_frame(request.make_response(ResponseCode.SUCCESS, None, ext))


@given(
    region=st.text(max_size=20),
    trace=st.sampled_from(["true", "false"]),
    opaque=st.integers(-(1 << 31), (1 << 31) - 1),
    answer=st.tuples(
        st.lists(_MSG_ID, min_size=1, max_size=3), st.integers(0, 1 << 16), st.integers(0, 1 << 62)
    ),
)
def test_answer_is_the_generic_frame(
    region: str, trace: str, opaque: int, answer: tuple[list[str], int, int]
) -> None:
    msg_ids, queue_id, offset = answer
    fixed = {"MSG_REGION": region, "TRACE_ON": trace}
    msg_id = ",".join(msg_ids)
    prefix = json_send_answer_prefix(fixed)
    if prefix is None:  # only a region that is not ASCII is left to the encoder
        assert not region.isascii()
        return
    built = encode_json_send_answer(prefix, opaque, msg_id, queue_id, offset)
    assert built == generic(fixed, opaque, msg_id, queue_id, offset)


def test_escaped_region_is_written_as_the_encoder_writes_it() -> None:
    fixed = {"MSG_REGION": 'a"b\\c\n\x01', "TRACE_ON": "true"}
    prefix = json_send_answer_prefix(fixed)
    assert prefix is not None
    built = encode_json_send_answer(prefix, 7, "0A" * 16, 3, 99)
    assert built == generic(fixed, 7, "0A" * 16, 3, 99)
    (decoded,) = FrameDecoder().feed(built)
    assert decoded.opaque == 7 and decoded.code == ResponseCode.SUCCESS and decoded.is_response
    assert decoded.ext_fields == {
        "MSG_REGION": 'a"b\\c\n\x01',
        "TRACE_ON": "true",
        "msgId": "0A" * 16,
        "queueId": "3",
        "queueOffset": "99",
    }


def test_non_ascii_region_goes_to_the_encoder() -> None:
    assert json_send_answer_prefix({"MSG_REGION": "région", "TRACE_ON": "true"}) is None

"""Wire codes: the numbers of RocketMQ 4.9; unknown codes stay ints."""

from __future__ import annotations

from protocol.codes import MQ_VERSION, LanguageCode, RequestCode, ResponseCode, SerializeType
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame


def test_key_numbers() -> None:
    numbers = {m.name: int(m) for enum in (RequestCode, ResponseCode, LanguageCode) for m in enum}
    assert MQ_VERSION == 407
    expected = {
        "SEND_MESSAGE": 10,
        "SEND_MESSAGE_V2": 310,
        "SEND_BATCH_MESSAGE": 320,
        "HEART_BEAT": 34,
        "GET_ROUTEINFO_BY_TOPIC": 105,
        "GET_BROKER_CLUSTER_INFO": 106,
        "DELETE_EXPIRED_COMMITLOG": 329,
        "REQUEST_CODE_NOT_SUPPORTED": 3,
        "MESSAGE_ILLEGAL": 13,
        "FLOW_CONTROL": 215,
        "TRANSACTION_STATE_UNKNOW": 202,
        "JAVA": 0,
        "CPP": 1,
        "RUST": 12,
        "NODE_JS": 13,
    }
    assert {name: numbers[name] for name in expected} == expected
    assert [int(t) for t in SerializeType] == [0, 1]


def test_codes_are_unique() -> None:
    for enum in (RequestCode, ResponseCode, LanguageCode):
        values = [int(m) for m in enum]
        assert len(values) == len(set(values))


def test_unknown_codes_stay_ints() -> None:
    cmd = RemotingCommand.request(4242, language=77)
    (decoded,) = FrameDecoder().feed(encode_frame(cmd))
    assert decoded.code == 4242
    assert type(decoded.code) is int
    assert decoded.language == 77
    assert RequestCode.name_of(4242) == "4242"
    assert RequestCode.name_of(310) == "SEND_MESSAGE_V2"
    assert ResponseCode.name_of(17) == "TOPIC_NOT_EXIST"

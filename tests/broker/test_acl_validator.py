"""The access decision for real requests: white lists, keys, signatures, permissions, logging."""

from __future__ import annotations

import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from broker.acl.validator import AccessValidator
from protocol.acl_signing import SessionCredentials, sign_request
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.route import ConsumerData, HeartbeatData, SubscriptionData

ACL = """
globalWhiteRemoteAddresses: ["10.10.103.*"]
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
    groupPerms: ["groupA=DENY", "groupB=PUB|SUB"]
  - accessKey: AdminUser
    secretKey: "adminsecret"
    admin: true
  - accessKey: WhiteListed
    secretKey: "whitesecret"
    whiteRemoteAddress: 192.168.1.*
    defaultTopicPerm: DENY
"""
USER = SessionCredentials("RocketMQ", "12345678")
ADMIN = SessionCredentials("AdminUser", "adminsecret")
LOCAL = ("127.0.0.1", 5555)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def validator(tmp_path: pathlib.Path, clock: Clock) -> AccessValidator:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    return AccessValidator(path, clock=clock)


def request(
    code: int,
    fields: dict[str, str],
    body: bytes | None = None,
    credentials: SessionCredentials | None = USER,
) -> RemotingCommand:
    command = RemotingCommand.request(code, dict(fields), body, opaque=7)
    if credentials is not None:
        sign_request(command, credentials)
    return command


def send_v2(topic: str, credentials: SessionCredentials | None = USER) -> RemotingCommand:
    fields = {"a": "P", "b": topic, "e": "0"}
    return request(RequestCode.SEND_MESSAGE_V2, fields, b"x", credentials)


def refused(
    validator: AccessValidator, command: RemotingCommand, remote: tuple[str, int] = LOCAL
) -> str:
    response = validator.check(command, remote)
    assert response is not None, "expected a refusal"
    assert response.code == ResponseCode.NO_PERMISSION
    assert response.opaque == command.opaque and response.is_response
    return response.remark or ""


def test_signed_request_with_permission_passes(validator: AccessValidator) -> None:
    assert validator.check(send_v2("topicB"), LOCAL) is None
    pull = {"topic": "topicC", "consumerGroup": "groupB", "queueId": "0"}
    assert validator.check(request(RequestCode.PULL_MESSAGE, pull), LOCAL) is None


def test_topic_permissions_and_defaults(validator: AccessValidator) -> None:
    assert refused(validator, send_v2("topicA")) == "No default permission for topic:topicA"
    assert refused(validator, send_v2("topicC")) == "No default permission for topic:topicC"
    assert refused(validator, send_v2("elsewhere")) == "No default permission for topic:elsewhere"
    v1 = {"producerGroup": "P", "topic": "topicA", "queueId": "0"}
    assert "topic:topicA" in refused(validator, request(RequestCode.SEND_MESSAGE, v1))
    batch = {"a": "P", "b": "topicA"}
    assert "topic:topicA" in refused(validator, request(RequestCode.SEND_BATCH_MESSAGE, batch))


def test_group_permissions_on_pull_and_offsets(validator: AccessValidator) -> None:
    pull = {"topic": "topicC", "consumerGroup": "groupA"}
    assert refused(validator, request(RequestCode.PULL_MESSAGE, pull)) == (
        "No default permission for group:groupA"
    )
    offsets = {"topic": "topicA", "consumerGroup": "groupB", "queueId": "0", "commitOffset": "1"}
    assert "topic:topicA" in refused(
        validator, request(RequestCode.UPDATE_CONSUMER_OFFSET, offsets)
    )
    query = {"topic": "topicC", "consumerGroup": "anyGroup", "queueId": "0"}
    assert validator.check(request(RequestCode.QUERY_CONSUMER_OFFSET, query), LOCAL) is None
    unregister = {"clientID": "c", "consumerGroup": "groupA"}
    assert "group:groupA" in refused(validator, request(RequestCode.UNREGISTER_CLIENT, unregister))


def test_a_retry_topic_send_needs_sub_on_the_group(validator: AccessValidator) -> None:
    assert validator.check(send_v2("%RETRY%groupB"), LOCAL) is None
    assert refused(validator, send_v2("%RETRY%groupA")) == "No default permission for group:groupA"


def test_heartbeat_needs_sub_on_announced_groups_and_topics(validator: AccessValidator) -> None:
    def heartbeat(group: str, topic: str) -> RemotingCommand:
        sub = SubscriptionData(topic, "*")
        consumer = ConsumerData(
            group, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", (sub,)
        )
        return request(RequestCode.HEART_BEAT, {}, HeartbeatData("c1", (), (consumer,)).to_json())

    assert validator.check(heartbeat("groupB", "topicC"), LOCAL) is None
    assert "topic:topicA" in refused(validator, heartbeat("groupB", "topicA"))
    assert "group:groupA" in refused(validator, heartbeat("groupA", "topicC"))
    garbage = request(RequestCode.HEART_BEAT, {}, b"{not json")
    assert "heartbeat body" in refused(validator, garbage)
    producer_only = HeartbeatData("c1").to_json()
    assert validator.check(request(RequestCode.HEART_BEAT, {}, producer_only), LOCAL) is None


def test_unknown_key_and_bad_signature_look_the_same(validator: AccessValidator) -> None:
    unknown = refused(
        validator, send_v2("topicB", credentials=SessionCredentials("Nobody99", "whatever"))
    )
    wrong = refused(
        validator, send_v2("topicB", credentials=SessionCredentials("RocketMQ", "12345679"))
    )
    assert unknown == "Check signature failed for accessKey=Nobody99"
    assert wrong == "Check signature failed for accessKey=RocketMQ"
    tampered = send_v2("topicB")
    tampered.body = b"y"
    assert refused(validator, tampered) == wrong


def test_missing_key_or_signature(validator: AccessValidator) -> None:
    assert refused(validator, send_v2("topicB", credentials=None)) == "No accessKey is configured"
    unsigned = send_v2("topicB")
    del unsigned.ext_fields["Signature"]
    assert refused(validator, unsigned).startswith("Check signature failed")


def test_white_listed_addresses(validator: AccessValidator) -> None:
    anonymous = send_v2("topicA", credentials=None)
    assert validator.check(anonymous, ("10.10.103.9", 1)) is None  # global: no key needed
    assert validator.check(anonymous, ("10.10.104.9", 1)) is not None
    # The account's white list: a known key, no valid signature, no permission check.
    unsigned = send_v2("topicA", credentials=SessionCredentials("WhiteListed", "not-the-secret"))
    assert validator.check(unsigned, ("192.168.1.20", 1)) is None
    assert validator.check(unsigned, ("192.168.2.20", 1)) is not None


def test_admin_codes_and_admin_accounts(validator: AccessValidator) -> None:
    create = {"topic": "NewTopic", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6"}
    assert refused(validator, request(RequestCode.UPDATE_AND_CREATE_TOPIC, create)) == (
        f"Need admin permission for request code={RequestCode.UPDATE_AND_CREATE_TOPIC}, "
        "but accessKey=RocketMQ is not"
    )
    assert (
        validator.check(
            request(RequestCode.UPDATE_AND_CREATE_TOPIC, create, credentials=ADMIN), LOCAL
        )
        is None
    )
    assert validator.check(send_v2("anyTopic", credentials=ADMIN), LOCAL) is None


def test_trace_topic_and_name_server_lookups(validator: AccessValidator) -> None:
    assert validator.check(send_v2("RMQ_SYS_TRACE_TOPIC"), LOCAL) is None
    route = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "topicA"})
    assert validator.check(route, LOCAL) is None  # unsigned: the name server checks no ACL


def test_refusals_are_logged_once_per_key_and_address(
    validator: AccessValidator, clock: Clock
) -> None:
    bad = SessionCredentials("RocketMQ", "secret-guess-1")
    with capture_logs() as logs:
        for _ in range(5):
            refused(validator, send_v2("topicB", credentials=bad))
        refused(validator, send_v2("topicB", credentials=bad), ("127.0.0.2", 1))
        clock.now = 61.0
        refused(validator, send_v2("topicB", credentials=bad))
    denied = [e for e in logs if e["event"] == "acl_denied"]
    assert [(e["remote_ip"], e["suppressed"]) for e in denied] == [
        ("127.0.0.1", 0),
        ("127.0.0.2", 0),
        ("127.0.0.1", 4),
    ]
    assert denied[0]["reason"] == "bad_signature" and denied[0]["access_key"] == "RocketMQ"
    text = json.dumps(logs, default=str)
    assert "secret-guess-1" not in text and "12345678" not in text


def test_long_access_keys_are_cut_in_remarks(validator: AccessValidator) -> None:
    remark = refused(validator, send_v2("topicB", credentials=SessionCredentials("K" * 5000, "x")))
    assert len(remark) < 200


@settings(max_examples=300, deadline=None)
@given(
    code=st.sampled_from([10, 11, 14, 15, 34, 35, 36, 38, 310, 320, 17, 105, 9999]),
    fields=st.dictionaries(
        st.sampled_from(
            ["AccessKey", "Signature", "topic", "b", "a", "consumerGroup", "group", "x"]
        ),
        st.text(max_size=20),
    ),
    body=st.one_of(
        st.none(), st.binary(max_size=64), st.just(b'{"consumerDataSet":[{"groupName":1}]}')
    ),
    ip=st.sampled_from(["127.0.0.1", "::1", "10.10.103.1", "192.168.1.5", "garbage", ""]),
)
def test_arbitrary_requests_get_a_decision_never_an_exception(
    tmp_path_factory: pytest.TempPathFactory,
    code: int,
    fields: dict[str, str],
    body: bytes | None,
    ip: str,
) -> None:
    validator = _fuzz_validator(tmp_path_factory)
    response = validator.check(RemotingCommand.request(code, fields, body), (ip, 1))
    assert response is None or response.code == ResponseCode.NO_PERMISSION


_FUZZ: list[AccessValidator] = []


def _fuzz_validator(factory: pytest.TempPathFactory) -> AccessValidator:
    if not _FUZZ:
        path = factory.mktemp("acl") / "plain_acl.yml"
        path.write_text(ACL)
        _FUZZ.append(AccessValidator(path))
    return _FUZZ[0]

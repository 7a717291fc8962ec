"""queryMsgByKey and queryMsgById through `rmq-broker admin` against a broker with traffic:
the ids, queues and offsets the sends returned come back, in --json and in the table."""

from __future__ import annotations

import base64

import trio

from rmq_client.producer import Message, Producer, SendResult
from tests.broker.cli_admin.support import Run, admin, plain_rows
from tests.daemon import Daemon

TOPIC = "CliMessages"


async def send_keyed(client: Producer) -> list[SendResult]:
    results = []
    for index in range(5):
        key = "order-7" if index % 2 == 0 else f"other-{index}"
        message = Message(TOPIC, f"body-{index}".encode(), keys=key, tags="TagM", queue_id=1)
        results.append(await client.send(message))
    return results


async def query_until_found(*args: str, count: int = 1) -> Run:
    """The index is built after the send returns, a batch of records at a time: ask again
    until it has `count` messages with the key."""
    with trio.fail_after(10):
        for _ in range(1000):
            run = await admin(*args)
            if run.code == 0 and ("--json" not in args or len(run.json()["messages"]) >= count):
                return run
            await trio.sleep(0.05)
    raise AssertionError(f"never found: {run.stderr}")


async def test_query_by_key_lists_the_messages_with_the_key(
    daemon: Daemon, client: Producer
) -> None:
    sent = await send_keyed(client)
    here = f"127.0.0.1:{daemon.port}"
    run = await query_until_found(
        "queryMsgByKey", "-n", here, "-t", TOPIC, "-k", "order-7", "--json", count=3
    )
    found = run.json()["messages"]
    expected = [sent[0], sent[2], sent[4]]
    assert [(m["msgId"], m["offsetMsgId"]) for m in found] == [
        (r.msg_id, r.offset_msg_id) for r in expected
    ]
    assert [(m["queueId"], m["queueOffset"]) for m in found] == [
        (1, r.queue_offset) for r in expected
    ]
    human = await admin("queryMsgByKey", "-n", here, "-t", TOPIC, "-k", "order-7")
    assert human.stdout.startswith("#Message ID\t#QID\t#Offset\n")
    assert plain_rows(human.stdout) == [[r.msg_id, "1", str(r.queue_offset)] for r in expected]
    missing = await admin("queryMsgByKey", "-n", here, "-t", TOPIC, "-k", "no-such-key")
    assert "no-such-key" in missing.error_line(1)


async def test_query_by_id_shows_the_stored_message(daemon: Daemon, client: Producer) -> None:
    sent = await send_keyed(client)
    here = f"127.0.0.1:{daemon.port}"
    run = await admin("queryMsgById", "-n", here, "-i", sent[3].offset_msg_id, "--json", "--body")
    data = run.json()
    assert (data["topic"], data["queue_id"], data["queue_offset"]) == (
        TOPIC,
        1,
        sent[3].queue_offset,
    )
    assert (data["keys"], data["tags"], data["offsetMsgId"]) == (
        "other-3",
        "TagM",
        sent[3].offset_msg_id,
    )
    assert base64.b64decode(data["body"]) == b"body-3"
    human = await admin("queryMsgById", "-n", here, "-i", sent[3].offset_msg_id)
    fields = dict(plain_rows(human.stdout))
    assert fields["Topic:"] == TOPIC and fields["Keys:"] == "[other-3]"
    assert fields["Queue Offset:"] == str(sent[3].queue_offset)
    assert fields["Store Host:"] == here

    bad = await admin("queryMsgById", "-n", here, "-i", "not-an-id")
    assert "not-an-id" in bad.error_line(2)
    # an id of this broker at an offset past its end
    past = sent[0].offset_msg_id[:-16] + f"{1 << 40:016X}"
    assert "not found" in (await admin("queryMsgById", "-i", past)).error_line(1)

"""A pull's suggestWhichBrokerId over real TCP: the master unless `slave_read_enable`; with it,
the group's slow-consumer broker when the pulled records lie further behind the log's end than
`access_message_in_memory_max_ratio` % of memory, else the group's own broker id."""

from __future__ import annotations

import pathlib

import pytest
import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import (
    FLAG_SUBSCRIPTION,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from rmq_client.producer import Message, SendStatus, open_producer
from tests.conftest import make_config, start_broker


async def suggested_after_pull(tmp_path: pathlib.Path, **overrides: object) -> int:
    config = make_config(tmp_path / "store", **overrides)
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, config)
        try:
            async with open_producer("127.0.0.1", broker.port) as client:
                for i in range(3):
                    sent = await client.send(Message("Suggest", b"m%d" % i, queue_id=0))
                    assert sent.status is SendStatus.SEND_OK
                header = PullMessageRequestHeader(
                    "SuggestGroup", "Suggest", 0, 0, 1, FLAG_SUBSCRIPTION, 0, 0, 0, "*", "TAG"
                )
                request = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields())
                response = await client.request(request, 10)
                assert response.code == ResponseCode.SUCCESS
                answer = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
                return answer.suggest_which_broker_id
        finally:
            await broker.stop()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"access_message_in_memory_max_ratio": 0}, 0),  # slave reads off: the master
        ({"slave_read_enable": True, "access_message_in_memory_max_ratio": 0}, 1),
        ({"slave_read_enable": True}, 0),  # 40 %: not behind, the group's broker_id
    ],
)
async def test_suggest_which_broker_id(
    tmp_path: pathlib.Path, overrides: dict[str, object], expected: int
) -> None:
    assert await suggested_after_pull(tmp_path, **overrides) == expected

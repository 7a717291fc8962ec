"""The records of a client-side batch (SEND_BATCH_MESSAGE, or a send whose header says batch):
the body split into messages as the Java client's `MessageBatch` encodes them, each re-checked
and given the batch's properties, as RocketMQ's `DefaultMessageStore.asyncPutMessages` expects.
"""

from __future__ import annotations

from typing import Final

from broker.processors import RequestContext
from broker.processors.send_checks import check_property_pairs
from broker.rewrites import delay_level
from broker.topic_config import RETRY_GROUP_TOPIC_PREFIX
from protocol.batch import decode_batch_body
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.compression import COMPRESSED_FLAG, COMPRESSION_TYPE_MASK, decompress_body
from protocol.errors import HeaderFieldError
from protocol.headers import SendMessageRequestHeader
from protocol.properties import MessageConst, decode_properties, encode_properties
from store.message import TRANSACTION_NOT_TYPE, get_transaction_value, java_string_hash
from store.message import MessageExtBrokerInner as Inner

MAX_PROPERTIES_LENGTH: Final = 32767
_MC = MessageConst

#: the store treats NUL in properties as a torn (zero-filled) write, so none may be stored
NUL_REMARK: Final = "message properties may not contain the NUL character"


def illegal(remark: str) -> HeaderFieldError:
    """A MESSAGE_ILLEGAL answer naming what is wrong with the message."""
    return HeaderFieldError("body", remark, ResponseCode.MESSAGE_ILLEGAL)


def batch_records(
    request: RemotingCommand,
    header: SendMessageRequestHeader,
    queue_id: int,
    sys_flag: int,
    ctx: RequestContext,
) -> list[Inner]:
    """The records of a SEND_BATCH_MESSAGE: the client's batch body split into messages, each
    with its own properties and the batch's (the batch's win), CLUSTER added."""
    broker = ctx.broker
    if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        raise illegal(f"Batch request does not support retry group {header.topic}")
    body = request.body or b""
    max_size = broker.config.store.max_message_size
    if sys_flag & COMPRESSED_FLAG:
        # The C++ client compresses a whole batch body of 4 KiB or more; the records are
        # stored uncompressed, each with its own CRC, so the flag goes with the wrapper.
        body = decompress_body(body, sys_flag, max_length=max_size + 1)
        sys_flag &= ~(COMPRESSED_FLAG | COMPRESSION_TYPE_MASK)
    if len(body) > max_size:
        raise illegal(f"batch body of {len(body)} bytes exceeds max_message_size {max_size}")
    batch_props = decode_properties(header.properties)
    if get_transaction_value(sys_flag) != TRANSACTION_NOT_TYPE or delay_level(batch_props) > 0:
        raise illegal("batch messages may not be transactional or delayed")
    batch_props[_MC.CLUSTER] = broker.config.broker_cluster_name
    wait_text = batch_props.get(_MC.WAIT_STORE_MSG_OK)
    batch_string = encode_properties(batch_props)
    if len(batch_string) > MAX_PROPERTIES_LENGTH:
        raise illegal(f"batch properties of {len(batch_string)} characters exceed 32767")
    records = []
    for index, entry in enumerate(decode_batch_body(body)):
        # Own pairs, then the batch's (they win), re-encoded: no pair without its \x01.
        own = decode_properties(entry.properties)
        pairs = {**own, **batch_props}
        check_property_pairs(pairs, f"batch message {index}: ")
        merged = encode_properties(pairs)
        if "\x00" in merged:
            raise illegal(f"batch message {index}: {NUL_REMARK}")
        if len(merged.encode("utf-8", "replace")) > MAX_PROPERTIES_LENGTH:
            raise illegal(f"batch message {index} has properties over 32767 bytes")
        tags = own.get(_MC.TAGS)
        records.append(
            Inner(
                topic=header.topic,
                queue_id=queue_id,
                body=entry.body,
                properties_string=merged,
                sys_flag=sys_flag,
                flag=entry.flag,
                born_timestamp=header.born_timestamp,
                born_host=ctx.remote,
                store_host=broker.store_host,
                reconsume_times=header.reconsume_times or 0,
                wait_store_msg_ok=wait_text is None or wait_text.lower() == "true",
                tags_code=java_string_hash(tags) if tags else 0,
            )
        )
    return records

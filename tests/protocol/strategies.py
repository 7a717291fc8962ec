"""Hypothesis strategies for commands and headers."""

from __future__ import annotations

from hypothesis import strategies as st

from protocol.codes import LanguageCode, SerializeType
from protocol.command import RemotingCommand

int16 = st.integers(-(1 << 15), (1 << 15) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
texts = st.text(max_size=40)
ext_fields = st.dictionaries(texts, texts, max_size=8)
bodies = st.none() | st.binary(min_size=1, max_size=300)
# "" is carried as "no remark" by both serializations
remarks = st.none() | st.text(min_size=1, max_size=40)


@st.composite
def commands(draw: st.DrawFn, serialize_type: SerializeType | None = None) -> RemotingCommand:
    chosen = serialize_type if serialize_type is not None else draw(st.sampled_from(SerializeType))
    if chosen is SerializeType.ROCKETMQ:
        code, version, language = draw(int16), draw(int16), draw(st.integers(0, 255))
    else:
        code, version = draw(int32), draw(int32)
        language = draw(st.sampled_from(LanguageCode) | st.integers(0, 255))
    return RemotingCommand(
        code=code,
        language=int(language),
        version=version,
        opaque=draw(int32),
        flag=draw(int32),
        remark=draw(remarks),
        ext_fields=draw(ext_fields),
        body=draw(bodies),
        serialize_type=chosen,
    )

"""h2's connection state machine with one change for a server: a peer's GOAWAY does not close it.

RFC 9113 6.8: a GOAWAY announces that its sender will not accept new streams from the receiver;
the streams the sender opened itself go on to completion. A gRPC client sends GOAWAY(NO_ERROR)
as soon as its channel is closed (grpc-js does, on `client.close()`), and the half-close or the
last messages of its calls in flight follow it. h2 moves its whole connection to CLOSED on any
received GOAWAY and then rejects every frame (`RECV_DATA in state CLOSED`), and it drops what
was queued to send. `ServerH2Connection` only reports the GOAWAY (a `ConnectionTerminated`
event); the connection task decides what it means (an error code ends the connection, NO_ERROR
lets the calls in flight finish). It replaces a private method of h2, which constraints.txt
pins; tests/grpc/test_server_h2.py's GOAWAY tests fail if another h2 version dispatches the
frame elsewhere.
"""

from __future__ import annotations

import h2.connection
import h2.errors
import h2.events
from hyperframe.frame import Frame, GoAwayFrame


class ServerH2Connection(h2.connection.H2Connection):
    def _receive_goaway_frame(
        self, frame: GoAwayFrame
    ) -> tuple[list[Frame], list[h2.events.Event]]:
        event = h2.events.ConnectionTerminated()
        try:
            event.error_code = h2.errors.ErrorCodes(frame.error_code)
        except ValueError:
            event.error_code = frame.error_code
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]

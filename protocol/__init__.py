"""The RocketMQ 4.9 remoting protocol, sans-IO: commands, frames, headers and body codecs.

Nothing here opens a socket or imports trio; the broker and `rmq_client` drive it.
"""

"""The commit-log store: RocketMQ 4.9's on-disk format, one writer task, flush services, recovery.

Knows files, offsets and a clock; never sockets or request codes.
"""

"""The standalone name server (`rmq-broker namesrv`): RocketMQ 4.9's route table and KV config.

Uses `protocol/` for the wire; never imports `store/` or `broker/`.
"""

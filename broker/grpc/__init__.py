"""RocketMQ 5's gRPC endpoint (`apache.rocketmq.v2.MessagingService`) beside the remoting port.

`methods` is the contract between the HTTP/2 server that carries the calls and the service that
answers them: each RPC is a `Method` naming its request type and an async handler.
"""

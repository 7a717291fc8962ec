"""RocketMQ 5 clients over gRPC: the HTTP/2 server, the messaging service, the official client."""

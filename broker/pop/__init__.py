"""RocketMQ 5's pop consumption: receipt handles, checkpoints and acks in the revive topic, the
service the remoting processors (and a gRPC front end) call, and the revive of what was not
acknowledged in time."""

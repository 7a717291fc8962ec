"""Master-slave replication with RocketMQ 4.9's HA protocol: `master` (the HA listener and one
connection per slave), `slave` (the client that copies the master's commit log) and `service`
(which of them a broker runs, by its role). Tasks over trio streams on top of `protocol.ha`
and the store's replication API (`store.replica`, `store.transfer`)."""

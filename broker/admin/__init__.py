"""Admin requests of RocketMQ 4.9 (`AdminBrokerProcessor`, the name server's admin codes),
one module per area: `topics`, `namesrv_admin`, `broker_info`; `state` holds what they keep
between calls and `runtime_config` the configuration changes made at run time."""

"""Admin requests of RocketMQ 4.9 (`AdminBrokerProcessor`, the name server's admin codes), one
module per area.

`topics`, `namesrv_admin`, `broker_info`: topics, routes and the broker's own figures and
configuration (`runtime_config`: the changes made at run time; `state`: what they keep between
calls). `groups`: consumer groups, their offsets and consume progress; `reset_offset`: resetting
a group's offsets to a time; `connections`: the clients connected per group, and the request
relayed to one of them. With ACL on, the codes that change state need an admin account
(`broker.acl.permission.ADMIN_CODES`).
"""

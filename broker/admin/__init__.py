"""Admin requests of RocketMQ 4.9's `AdminBrokerProcessor`, one module per area.

`groups`: consumer groups, their offsets and consume progress; `reset_offset`: resetting a
group's offsets to a time; `connections`: the clients connected per group, and the request
relayed to one of them. With ACL on, the codes that change state need an admin account
(`broker.acl.permission.ADMIN_CODES`).
"""

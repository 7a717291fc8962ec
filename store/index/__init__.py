"""The message index: RocketMQ 4.9's IndexFile by KEYS and UNIQ_KEY (`index_file`), the service
that builds, saves, repairs and deletes the files (`service`) and the queries a broker answers
with it (`query`)."""

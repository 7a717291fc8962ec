// Run by node with NODE_PATH at the node_modules tests/grpc/install-node-client.sh fills:
//   node client_node.js ENDPOINT GROUP TOPIC COUNT SECONDS DLQ_TOPIC DLQ_ATTEMPTS
// The Node.js client's Producer sends COUNT normal messages (body "n-i", tag "Tag<i % 3>", key
// "key-i", property seq=i), three FIFO messages of message group "group-1" (body "fifo-i"), one
// message delivered 2 s later (body "delayed"), two more (bodies "slow-0" and "slow-1") and three
// transactional ones: "tx-commit" committed, "tx-rollback" rolled back, "tx-unknown" left open
// until the broker asks the producer's TransactionChecker (which commits it and notes its message
// id). A PushConsumer of group GROUP-push consumes every message; the SimpleConsumer of group
// GROUP receives (invisible 2 s) and acks, except that it leaves "n-0" unacked the first time,
// changes the invisible duration of "slow-0" to 4 s and leaves it unacked, and changes that of
// "slow-1" to 3 s and acks it under its new receipt handle; until it has acked them all and the
// PushConsumer has them all too, or SECONDS pass (an ack or change the broker refuses throws).
// Meanwhile one message (body "doomed", tag "TagD", key "key-d", property origin=node) goes to
// DLQ_TOPIC, where the listeners of two more PushConsumers fail it every time: one of group
// GROUP-dlq (retried by the broker), one of group GROUP-fifo (a FIFO group: retried inside the
// client, then forwarded to the DLQ by it); the run goes on until the first has seen
// DLQ_ATTEMPTS deliveries and the second one, and 1 s after the last of them (a delivery too
// many would show).
// Prints one JSON line: the message ids sent, the delayed one's delivery time, the ids the
// checker was asked about, each SimpleConsumer delivery as [body, tag, keys, seq, message id,
// message group, received at ms, delivery attempt], when each invisible duration was changed
// (ms, before the call), each PushConsumer delivery as [body, message id, delivery attempt],
// each failed delivery as [group suffix, body, message id, delivery attempt], and any error.
'use strict';
const util = require('node:util');
const { Producer, PushConsumer, SimpleConsumer, ConsumeResult } = require('rocketmq-client-nodejs');

// The client's default logger writes under ~/logs, and BaseClient.shutdown closes it before
// Producer.shutdown logs its last line (which then throws): log to stderr instead.
function line(level) {
  return (...args) => process.stderr.write(`${level} ${util.format(...args)}\n`);
}
const logger = { debug: line('DEBUG'), info: line('INFO'), warn: line('WARN'), error: line('ERROR') };
const COMMIT = 1; // apache.rocketmq.v2.TransactionResolution
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function sendAll(producer, topic, count, result) {
  for (let i = 0; i < count; i++) {
    const receipt = await producer.send({
      topic,
      tag: `Tag${i % 3}`,
      keys: [`key-${i}`],
      properties: new Map([['seq', String(i)]]),
      body: Buffer.from(`n-${i}`),
    });
    result.sent.push(receipt.messageId);
  }
  for (let i = 0; i < 3; i++) {
    const body = Buffer.from(`fifo-${i}`);
    const receipt = await producer.send({ topic, body, messageGroup: 'group-1' });
    result.fifo.push(receipt.messageId);
  }
  result.deliverAt = Date.now() + 2000;
  const deliveryTimestamp = new Date(result.deliverAt);
  const delayed = await producer.send({ topic, body: Buffer.from('delayed'), deliveryTimestamp });
  result.delayed = delayed.messageId;
  for (const body of ['slow-0', 'slow-1']) await producer.send({ topic, body: Buffer.from(body) });
  for (const end of ['commit', 'rollback', 'unknown']) {
    const transaction = producer.beginTransaction();
    const receipt = await producer.send({ topic, body: Buffer.from(`tx-${end}`) }, transaction);
    result.tx[end] = receipt.messageId;
    if (end === 'commit') await transaction.commit();
    if (end === 'rollback') await transaction.rollback();
  }
}

async function sendDoomed(producer, topic) {
  const properties = new Map([['origin', 'node']]);
  const doomed = { topic, tag: 'TagD', keys: ['key-d'], properties, body: Buffer.from('doomed') };
  return (await producer.send(doomed)).messageId;
}

async function main() {
  const [endpoints, group, topic, countText, secondsText, dlqTopic, attemptsText] =
    process.argv.slice(2);
  const count = Number(countText);
  const expected = count + 8;
  const until = Date.now() + Number(secondsText) * 1000;
  const result = {
    sent: [], fifo: [], delayed: null, deliverAt: 0, tx: {}, checked: [], seen: [], pushed: [],
    changed: {}, doomed: null, failed: [], errors: [],
  };
  const checker = {
    async check(messageView) {
      result.checked.push(messageView.messageId);
      return COMMIT;
    },
  };
  const producer = new Producer({ endpoints, logger, requestTimeout: 5000, checker, topics: [topic] });
  const common = { endpoints, logger, requestTimeout: 5000, subscriptions: new Map([[topic, '*']]) };
  const pushConsumer = new PushConsumer({
    ...common,
    consumerGroup: `${group}-push`,
    messageListener: {
      consume(message) {
        result.pushed.push([message.body.toString(), message.messageId, message.deliveryAttempt]);
        return ConsumeResult.SUCCESS;
      },
    },
  });
  const consumer = new SimpleConsumer({ ...common, consumerGroup: group, awaitDuration: 2000 });
  let lastFailure = 0;
  const failing = suffix => new PushConsumer({
    endpoints,
    logger,
    requestTimeout: 5000,
    subscriptions: new Map([[dlqTopic, '*']]),
    consumerGroup: `${group}-${suffix}`,
    messageListener: {
      consume(message) {
        const body = message.body.toString();
        result.failed.push([suffix, body, message.messageId, message.deliveryAttempt]);
        lastFailure = Date.now();
        return ConsumeResult.FAILURE;
      },
    },
  });
  const failers = [failing('dlq'), failing('fifo')];
  const failedAll = () => {
    const times = suffix => result.failed.filter(row => row[0] === suffix).length;
    const quiet = Date.now() - lastFailure > 1000;
    return times('dlq') >= Number(attemptsText) && times('fifo') >= 1 && quiet;
  };
  try {
    await producer.startup();
    await pushConsumer.startup();
    for (const failer of failers) await failer.startup();
    result.doomed = await sendDoomed(producer, dlqTopic);
    await sendAll(producer, topic, count, result);
    await consumer.startup();
    const acked = new Set();
    const pushedAll = () => new Set(result.pushed.map(row => row[0])).size >= expected;
    const done = () => acked.size >= expected && pushedAll() && failedAll();
    while (!done() && Date.now() < until) {
      if (acked.size >= expected) {
        await sleep(100);
        continue;
      }
      for (const message of await consumer.receive(16, 2000)) {
        const body = message.body.toString();
        result.seen.push([
          body,
          message.tag || null,
          message.keys,
          message.properties.get('seq') ?? null,
          message.messageId,
          message.messageGroup || null,
          Date.now(),
          message.deliveryAttempt,
        ]);
        const first = message.deliveryAttempt === 1;
        if (body === 'n-0' && first) continue;
        if (body.startsWith('slow-') && first) {
          result.changed[body] = Date.now();
          await consumer.changeInvisibleDuration(message, body === 'slow-0' ? 4000 : 3000);
          if (body === 'slow-0') continue;
        }
        await consumer.ack(message);
        acked.add(body);
      }
    }
  } catch (err) {
    result.errors.push(String(err && err.stack ? err.stack : err));
  }
  const shutdown = async client => {
    try {
      await client.shutdown();
    } catch (err) {
      result.errors.push(String(err && err.stack ? err.stack : err));
    }
  };
  await shutdown(consumer);
  // A PushConsumer's shutdown waits for its receive in flight, which the broker holds for the
  // long-polling time it told the client (20 s) unless a message comes: send one to end it.
  const pushDone = Promise.all([pushConsumer, ...failers].map(shutdown));
  await sleep(200);
  try {
    await producer.send({ topic, body: Buffer.from('wake') });
    await producer.send({ topic: dlqTopic, body: Buffer.from('wake') });
  } catch (err) {
    result.errors.push(String(err && err.stack ? err.stack : err));
  }
  await pushDone;
  await shutdown(producer);
  console.log(JSON.stringify(result));
  // grpc-js ends its connection a moment after the last client closed its channel; exiting
  // before that resets it (the broker logs a reset connection)
  await sleep(500);
  process.exit(0);
}

main();

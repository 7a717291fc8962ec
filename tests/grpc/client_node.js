// Run by node with NODE_PATH at the node_modules tests/grpc/install-node-client.sh fills:
//   node client_node.js ENDPOINT GROUP TOPIC COUNT SECONDS
// The Node.js client's Producer sends COUNT normal messages (body "n-i", tag "Tag<i % 3>", key
// "key-i", property seq=i), three FIFO messages of message group "group-1" (body "fifo-i") and
// one message delivered 2 s later (body "delayed"); then its SimpleConsumer receives and acks
// until it has them all or SECONDS pass (an ack the broker refuses throws). Prints one JSON
// line: the message ids sent, the delayed one's delivery time, each delivery as
// [body, tag, keys, seq, message id, message group, received at ms], and any error.
'use strict';
const util = require('node:util');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

// The client's default logger writes under ~/logs, and BaseClient.shutdown closes it before
// Producer.shutdown logs its last line (which then throws): log to stderr instead.
function line(level) {
  return (...args) => process.stderr.write(`${level} ${util.format(...args)}\n`);
}
const logger = { debug: line('DEBUG'), info: line('INFO'), warn: line('WARN'), error: line('ERROR') };

async function main() {
  const [endpoints, group, topic, countText, secondsText] = process.argv.slice(2);
  const count = Number(countText);
  const until = Date.now() + Number(secondsText) * 1000;
  const result = { sent: [], fifo: [], delayed: null, deliverAt: 0, seen: [], errors: [] };
  const producer = new Producer({ endpoints, logger, requestTimeout: 5000 });
  try {
    await producer.startup();
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
    await producer.shutdown();
    const consumer = new SimpleConsumer({
      consumerGroup: group,
      endpoints,
      logger,
      requestTimeout: 5000,
      subscriptions: new Map([[topic, '*']]),
      awaitDuration: 2000,
    });
    await consumer.startup();
    while (result.seen.length < count + 4 && Date.now() < until) {
      for (const message of await consumer.receive(16, 10000)) {
        result.seen.push([
          message.body.toString(),
          message.tag || null,
          message.keys,
          message.properties.get('seq') ?? null,
          message.messageId,
          message.messageGroup || null,
          Date.now(),
        ]);
        await consumer.ack(message);
      }
    }
    await consumer.shutdown();
  } catch (err) {
    result.errors.push(String(err && err.stack ? err.stack : err));
  }
  console.log(JSON.stringify(result));
  process.exit(0);
}

main();

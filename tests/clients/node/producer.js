// A web tier's buy publisher written with kafkajs, as tests/integration/45-web-tier-clients.sh
// runs it and docs/web-tier.md shows it. kafkajs 2.x's default
// partitioner hashes the key with murmur2 as Kafka's Java client does: the rule,
// murmur2(key) % partitions. (kafkajs 1.x's default was another hash: its
// Partitioners.JavaCompatiblePartitioner is the rule there.)
//
//   NODE_PATH=.local/cache/node/node_modules node tests/clients/node/producer.js \
//       BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...
//
// Publishes BUYERS_PER_SKU buys for each SKU (buyer ids BUYER_PREFIX-1, -2, ...) and prints one
// line per delivered buy: INTENT_ID SKU PARTITION OFFSET; exit 1 if one was not delivered.
'use strict'
const { randomUUID } = require('crypto')
const fs = require('fs')
const kafkajs = require('kafkajs')
const { Partitioners, logLevel } = kafkajs

// The secured broker's settings (tests/integration/79-secured-broker.sh) when
// CLIENT_SASL_USERNAME, CLIENT_SASL_PASSWORD_FILE and CLIENT_SSL_CA are set: SCRAM-SHA-512 over
// TLS, the password read from its file; added to the snippet's client, which shows a plain one.
const { CLIENT_SASL_USERNAME: saslUser, CLIENT_SASL_PASSWORD_FILE: pwFile, CLIENT_SSL_CA: caFile } = process.env
class Kafka extends kafkajs.Kafka {
  constructor (config) {
    if (saslUser && pwFile && caFile) {
      config = {
        ...config,
        ssl: { ca: [fs.readFileSync(caFile, 'utf8')] },
        sasl: { mechanism: 'scram-sha-512', username: saslUser, password: fs.readFileSync(pwFile, 'utf8').trim() }
      }
    }
    super(config)
  }
}

async function main () {
  const [brokers, topic, prefix, perSku, ...skus] = process.argv.slice(2)
  if (skus.length === 0) {
    console.error('usage: producer.js BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...')
    process.exit(2)
  }
  // Each checkout attempt's record is made once, with its intent id; a retry sends it again.
  const buys = []
  for (const sku of skus) {
    for (let i = 1; i <= Number(perSku); i++) {
      const intentId = randomUUID()
      buys.push({ intentId, sku, value: JSON.stringify({ v: 1, type: 'buy', intent_id: intentId, sku, buyer_id: `${prefix}-${i}`, qty: 1 }) })
    }
  }

  // snippet:begin
  const kafka = new Kafka({ clientId: 'web-tier', brokers: brokers.split(','), logLevel: logLevel.WARN })
  const producer = kafka.producer({
    idempotent: true, // needs acks -1 (all) and one request in flight
    maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner // murmur2, the rule (and no warning)
  })
  await producer.connect()
  // One buy, its record made once: every attempt sends the same intent id.
  async function publishBuy (buy) {
    for (let attempt = 1; ; attempt++) {
      try {
        const [meta] = await producer.send({ topic, acks: -1, messages: [{ key: buy.sku, value: buy.value }] })
        return meta
      } catch (err) {
        if (attempt === 3) throw err
      }
    }
  }
  // snippet:end
  let failed = 0
  await Promise.all(buys.map(async (buy) => {
    try {
      const meta = await publishBuy(buy)
      console.log(`${buy.intentId} ${buy.sku} ${meta.partition} ${meta.baseOffset}`)
    } catch (err) {
      failed++
      console.error(`producer.js: ${buy.intentId} not delivered: ${err.message}`)
    }
  }))
  await producer.disconnect()
  if (failed > 0) {
    console.error(`producer.js: ${failed} buys not delivered`)
    process.exit(1)
  }
}

main().catch((err) => {
  console.error(`producer.js: ${err.stack || err}`)
  process.exit(1)
})

#!/usr/bin/python3
"""A web tier's buy publisher written with confluent-kafka for Python (librdkafka), as
tests/integration/45-web-tier-clients.sh runs it and docs/web-tier.md shows it.
librdkafka's default partitioner is consistent_random (CRC32 of the key), not
the rule: partitioner=murmur2_random is, murmur2(key) % partitions as Kafka's Java client does.

    /usr/bin/python3 tests/clients/confluent_producer.py BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...

Publishes BUYERS_PER_SKU buys for each SKU (buyer ids BUYER_PREFIX-1, -2, ...) and prints one
line per delivered buy: INTENT_ID SKU PARTITION OFFSET; exit 1 if one was not delivered. With
CLIENT_DEFAULT_PARTITIONER=1 in the environment it keeps librdkafka's default partitioner (the
test's misrouting client).
"""
import json
import os
import sys

from confluent_kafka import Producer

import buys


def main():
    brokers, topic, pending = buys.from_args("confluent_producer.py")

    # snippet:begin
    conf = {
        "bootstrap.servers": brokers,
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",  # the rule; librdkafka's default is CRC32
    }
    # snippet:end
    if os.environ.get("CLIENT_DEFAULT_PARTITIONER"):
        del conf["partitioner"]
    conf.update(buys.security("librdkafka"))
    producer = Producer(conf)
    for attempt in range(3):
        failed = []

        def delivered(err, msg, sku, body):
            if err is not None:
                failed.append((sku, body))  # sent again as it is: the same intent id
            else:
                print(json.loads(body)["intent_id"], sku, msg.partition(), msg.offset())

        for sku, body in pending:
            producer.produce(topic, key=sku, value=body,
                             on_delivery=lambda err, msg, sku=sku, body=body: delivered(err, msg, sku, body))
            producer.poll(0)
        if producer.flush(60) != 0:
            sys.exit("confluent_producer.py: records still queued after 60 s")
        pending = failed
        if not pending:
            break
    if pending:
        sys.exit("confluent_producer.py: %d buys not delivered" % len(pending))


if __name__ == "__main__":
    main()

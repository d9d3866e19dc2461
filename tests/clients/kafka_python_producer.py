#!/usr/bin/python3
"""A web tier's buy publisher written with kafka-python, as
tests/integration/45-web-tier-clients.sh runs it and docs/web-tier.md shows it.
kafka-python's default partitioner hashes the key with murmur2 as Kafka's
Java client does: the rule, murmur2(key) % partitions.

    /usr/bin/python3 tests/clients/kafka_python_producer.py BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...

Publishes BUYERS_PER_SKU buys for each SKU (buyer ids BUYER_PREFIX-1, -2, ...) and prints one
line per delivered buy: INTENT_ID SKU PARTITION OFFSET; exit 1 if one was not delivered.
"""
import json
import sys

from kafka import KafkaProducer
from kafka.errors import KafkaError

import buys


def main():
    brokers, topic, pending = buys.from_args("kafka_python_producer.py")

    # snippet:begin
    settings = dict(bootstrap_servers=brokers.split(","), acks="all", retries=5,
                    max_in_flight_requests_per_connection=1,
                    key_serializer=str.encode, value_serializer=str.encode)
    # kafka-python 2.1 and later have an idempotent producer; 2.0.2 (Debian 12's) has none, and a
    # retry of its may store a buy twice: the worker answers the copy as a repeat of the intent.
    if "enable_idempotence" in KafkaProducer.DEFAULT_CONFIG:
        settings["enable_idempotence"] = True
    # No partitioner: the default hashes the key with murmur2, which is the rule.
    # snippet:end
    settings.update(buys.security("kafka-python"))  # the secured broker's test only
    # snippet:begin
    producer = KafkaProducer(**settings)
    for attempt in range(3):
        sent = [(sku, body, producer.send(topic, key=sku, value=body)) for sku, body in pending]
        pending = []
        for sku, body, future in sent:
            try:
                meta = future.get(timeout=30)
            except KafkaError:
                pending.append((sku, body))  # sent again as it is: the same intent id
                continue
            print(json.loads(body)["intent_id"], sku, meta.partition, meta.offset)
        if not pending:
            break
    producer.close()
    # snippet:end
    if pending:
        sys.exit("kafka_python_producer.py: %d buys not delivered" % len(pending))


if __name__ == "__main__":
    main()

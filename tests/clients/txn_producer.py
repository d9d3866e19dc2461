#!/usr/bin/python3
"""A web tier that publishes its buys in Kafka transactions (confluent-kafka for Python,
librdkafka's transactional producer), as tests/integration/25-transactional.sh runs it.

    /usr/bin/python3 tests/clients/txn_producer.py BROKERS TOPIC SKU TRANSACTIONS PER_TXN ABORT_EVERY

Publishes TRANSACTIONS transactions of PER_TXN buys of SKU each (buyer ids txn-T-I), with the
rule's partitioner; every ABORT_EVERY-th transaction (1-based; 0: none) is aborted instead of
committed. Each transaction leaves a control record (its commit or abort marker) in the log:
an offset that no consumer is given. Prints one line per buy: committed|aborted INTENT_ID; exit
1 on any error.
"""
import json
import sys
import uuid

from confluent_kafka import KafkaException, Producer


def main():
    if len(sys.argv) != 7:
        sys.exit("usage: txn_producer.py BROKERS TOPIC SKU TRANSACTIONS PER_TXN ABORT_EVERY")
    brokers, topic, sku = sys.argv[1], sys.argv[2], sys.argv[3]
    txns, per_txn, abort_every = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    producer = Producer({
        "bootstrap.servers": brokers,
        "transactional.id": "flashsale-test-" + str(uuid.uuid4()),
        "partitioner": "murmur2_random",  # the rule
        "transaction.timeout.ms": 60000,
    })
    try:
        producer.init_transactions(30)
        for t in range(1, txns + 1):
            producer.begin_transaction()
            ids = []
            for i in range(1, per_txn + 1):
                intent = str(uuid.uuid4())
                body = json.dumps({"v": 1, "type": "buy", "intent_id": intent, "sku": sku,
                                   "buyer_id": "txn-%d-%d" % (t, i), "qty": 1},
                                  separators=(",", ":"))
                producer.produce(topic, key=sku, value=body)
                ids.append(intent)
            aborted = abort_every > 0 and t % abort_every == 0
            if aborted:
                # Its records in the log first: an abort while the partition's registration
                # with the transaction is still under way fails INVALID_TXN_STATE with
                # librdkafka 2.0 (confluentinc/librdkafka#4849).
                producer.flush(30)
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
            for intent in ids:
                print("%s %s" % ("aborted" if aborted else "committed", intent))
    except KafkaException as e:
        sys.exit("txn_producer.py: %s" % e)


if __name__ == "__main__":
    main()

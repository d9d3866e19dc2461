"""What the Python web-tier producers of tests/clients share: their arguments and the buys they
publish, one record per checkout attempt, made once with its intent id.

    PROGRAM BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...
"""
import json
import sys
import uuid


def from_args(prog):
    """(brokers, topic, [(sku, body), ...]): BUYERS_PER_SKU buys for each SKU, buyer ids
    BUYER_PREFIX-1, -2, ...; exits with the usage on a bad command line."""
    if len(sys.argv) < 6:
        sys.exit("usage: %s BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU..." % prog)
    brokers, topic, prefix, per_sku, skus = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
    # Each checkout attempt's record is made once, with its intent id; a retry sends it again.
    pending = [(sku, json.dumps({"v": 1, "type": "buy", "intent_id": str(uuid.uuid4()), "sku": sku,
                                 "buyer_id": "%s-%d" % (prefix, i), "qty": 1}, separators=(",", ":")))
               for sku in skus for i in range(1, per_sku + 1)]
    return brokers, topic, pending

"""What the Python web-tier producers of tests/clients share: their arguments and the buys they
publish, one record per checkout attempt, made once with its intent id.

    PROGRAM BROKERS TOPIC BUYER_PREFIX BUYERS_PER_SKU SKU...
"""
import json
import os
import sys
import uuid


def security(kind):
    """The secured broker's settings (tests/integration/79-secured-broker.sh) when
    CLIENT_SASL_USERNAME, CLIENT_SASL_PASSWORD_FILE and CLIENT_SSL_CA are set: SCRAM-SHA-512
    over TLS, the password read from its file; {} otherwise. kind: "librdkafka" (confluent-kafka)
    or "kafka-python"."""
    user, pwfile, ca = (os.environ.get(k) for k in ("CLIENT_SASL_USERNAME", "CLIENT_SASL_PASSWORD_FILE", "CLIENT_SSL_CA"))
    if not (user and pwfile and ca):
        return {}
    with open(pwfile, encoding="utf-8") as f:
        password = f.read().strip()
    if kind == "librdkafka":
        return {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                "sasl.username": user, "sasl.password": password, "ssl.ca.location": ca}
    return dict(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                sasl_plain_username=user, sasl_plain_password=password, ssl_cafile=ca)


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

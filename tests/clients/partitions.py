#!/usr/bin/python3
"""Where each client's default partitioner puts a key, for tests/integration/45-web-tier-clients.sh.

    /usr/bin/python3 tests/clients/partitions.py PARTITIONS KEY...

prints one line per key: KEY MURMUR2 CRC32 FNV1A, the partition of
  - the rule, Kafka's Java default: toPositive(murmur2(key)) % n (kafka-python's own murmur2,
    the one its default partitioner uses; also kafkajs 2.x, franz-go, librdkafka murmur2_random);
  - librdkafka's default consistent_random (confluent-kafka): crc32(key) % n;
  - sarama's default NewHashPartitioner: |int32(fnv1a_32(key)) % n| (Go's remainder keeps the
    sign of the dividend; NewReferenceHashPartitioner's (fnv1a & 0x7fffffff) % n is FNV too).
"""
import sys
import zlib

from kafka.partitioner.default import murmur2


def fnv1a_32(data):
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def sarama_hash(data, n):
    h = fnv1a_32(data)
    h = h - (1 << 32) if h >= 1 << 31 else h  # int32
    r = abs(h) % n  # Go: int32(h) % n, then negated if negative
    return r


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: partitions.py PARTITIONS KEY...")
    n = int(sys.argv[1])
    for key in sys.argv[2:]:
        data = key.encode()
        print(key, (murmur2(data) & 0x7FFFFFFF) % n, zlib.crc32(data) % n, sarama_hash(data, n))


if __name__ == "__main__":
    main()

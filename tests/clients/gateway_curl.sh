#!/usr/bin/env bash
# The README's curl examples ("The HTTP front door"), run as they are by
# tests/integration/66-gateway.sh, from the repository's root, against a gateway at $GW with
# the admin token $TOKEN and the payment key ring $PAYMENT_KEYS; the test checks what they
# print. The part between the markers is the README's block (tests/clients/check-snippets.py
# compares them).
set -euo pipefail
: "${GW:?GW=http://127.0.0.1:PORT}" "${TOKEN:?TOKEN=the admin token of the gateway}"
: "${PAYMENT_KEYS:?PAYMENT_KEYS=the payment.secret.file of the gateway}"
# snippet:begin
# Open a sale (the admin endpoints need the gateway's admin token; curl reads the header from
# a pipe, so that the token is on no command line):
curl -s -X POST "$GW/v1/skus/PHONE/open" -H @<(printf 'Authorization: Bearer %s\n' "$TOKEN") \
  -H 'Content-Type: application/json' -d '{"stock": 500, "per_buyer_limit": 1}'
# A buy. The Idempotency-Key is the intent id: made once per checkout attempt, sent again on
# every retry. 202 means the buy is on the log and will be decided.
KEY=$(cat /proc/sys/kernel/random/uuid)
curl -s -X POST "$GW/v1/skus/PHONE/buys" -H "Idempotency-Key: $KEY" \
  -H 'Content-Type: application/json' -d '{"buyer_id": "alice", "qty": 1}'
# The decision, long-polled: answered the moment it reaches the gateway.
curl -s "$GW/v1/intents/$KEY?wait=10"
# Or as Server-Sent Events: decided, then what becomes of the hold.
curl -s -N --max-time 2 "$GW/v1/intents/$KEY/events" || true
# The payment provider confirms, signing the body (which names the intent) with the secret it
# shares with the gateway (payment.secret.file); scripts/payment-stub signs as one would:
BODY="{\"intent_id\": \"$KEY\", \"sku\": \"PHONE\"}"
SIG=$(scripts/payment-stub sign --keys "$PAYMENT_KEYS" -- "$BODY")
curl -s -X POST "$GW/v1/intents/$KEY/confirm" -H "Flashsale-Signature: $SIG" \
  -H 'Content-Type: application/json' -d "$BODY"
curl -s "$GW/v1/intents/$KEY/confirm?wait=10"
# The sale page's counter:
curl -s "$GW/v1/skus/PHONE"
# snippet:end

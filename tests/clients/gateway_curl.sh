#!/usr/bin/env bash
# The README's curl examples ("The HTTP front door"), run as they are by
# tests/integration/66-gateway.sh, from the repository's root, against a gateway at $GW with
# the admin token $TOKEN, the payment key ring $PAYMENT_KEYS and the buyers' key ring $BUYER_KEYS; the test checks what they
# print. The part between the markers is the README's block (tests/clients/check-snippets.py
# compares them).
set -euo pipefail
: "${GW:?GW=http://127.0.0.1:PORT}" "${TOKEN:?TOKEN=the admin token of the gateway}"
: "${PAYMENT_KEYS:?PAYMENT_KEYS=the payment.secret.file of the gateway}"
: "${BUYER_KEYS:?BUYER_KEYS=the auth.jwt.keys of the gateway}"
# snippet:begin
# Open a sale (the admin endpoints need the gateway's admin token; curl reads the header from
# a pipe, so that the token is on no command line):
curl -s -X POST "$GW/v1/skus/PHONE/open" -H @<(printf 'Authorization: Bearer %s\n' "$TOKEN") \
  -H 'Content-Type: application/json' -d '{"stock": 500, "per_buyer_limit": 1}'
# A buy. The Idempotency-Key is the intent id: made once per checkout attempt, sent again on
# every retry. 202 means the buy is on the log and will be decided.
# Alice's token, as the shop's login mints it when she logs in: a JWT whose sub is her buyer
# id, HS256 under a key of auth.jwt.keys (tests/clients/jwt_mint.py stands in for the shop).
ALICE=$(python3 tests/clients/jwt_mint.py alice --keys "$BUYER_KEYS")
KEY=$(cat /proc/sys/kernel/random/uuid)
curl -s -X POST "$GW/v1/skus/PHONE/buys" -H "Idempotency-Key: $KEY" \
  -H @<(printf 'Authorization: Bearer %s\n' "$ALICE") \
  -H 'Content-Type: application/json' -d '{"buyer_id": "alice", "qty": 1}'
# The decision, long-polled: answered the moment it reaches the gateway (alice's only).
curl -s "$GW/v1/intents/$KEY?wait=10" -H @<(printf 'Authorization: Bearer %s\n' "$ALICE")
# Or as Server-Sent Events: decided, then what becomes of the hold.
curl -s -N --max-time 2 "$GW/v1/intents/$KEY/events" \
  -H @<(printf 'Authorization: Bearer %s\n' "$ALICE") || true
# The payment provider confirms, signing the body (which names the intent) with the secret it
# shares with the gateway (payment.secret.file); scripts/payment-stub signs as one would:
BODY="{\"intent_id\": \"$KEY\", \"sku\": \"PHONE\"}"
SIG=$(scripts/payment-stub sign --keys "$PAYMENT_KEYS" -- "$BODY")
curl -s -X POST "$GW/v1/intents/$KEY/confirm" -H "Flashsale-Signature: $SIG" \
  -H 'Content-Type: application/json' -d "$BODY"
# Its decision, as alice's page reads it:
curl -s "$GW/v1/intents/$KEY/confirm?wait=10" -H @<(printf 'Authorization: Bearer %s\n' "$ALICE")
# The sale page's counter:
curl -s "$GW/v1/skus/PHONE"
# snippet:end

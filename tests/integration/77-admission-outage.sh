#!/usr/bin/env bash
# Admissions after a worker outage (issue 47, item 4), on the real services. Two sales behind
# waiting rooms (rate 2/s, tokens of 3 s, fifo), one partition:
#   1. An idle outage: the worker stopped 8 s while nothing reaches the partition, then
#      restarted. The admissions resume at the rate: the buyers' first admission results the
#      broker stamps in the first second after the restart are at most 5 (3 at the first tick: the slots of
#      the catch-up bound, 1 s; 1 in the rest of that second; 1 for a tick the stopped worker
#      may have left), not the 18 or so slots the outage passed, at once (its main).
#   2. An outage with traffic: the worker stopped 12 s while joins keep arriving, then
#      restarted. Every buyer admitted after the restart holds, in its last admission result,
#      a token whose end is still ahead of the broker's stamp of the result by at least 2 of
#      its 3 s, where the backlog's own records used to admit with their old clocks (25 of 31
#      dead on arrival in the issue; 19 of 40 here on its main).
#   3. A stale tick: a worker killed right after it appended a tick that admits (crash point
#      after_tick), before reading it back; restarted 6 s later, more than the tokens' life.
#      The next owner decides that tick with its old stamp (its buyers' tokens dead), then
#      its first tick re-mints them (docs/DESIGN-NOTES.md, "After an outage"): a second
#      admission result, fresh token. Every buyer's last token has at least 2 s left at its
#      stamp; at least one buyer was re-minted (on the main before the re-mint: its only
#      token dead).
# Audit (INV-9) and the replay clean.
. "$(dirname "$0")/lib.sh"
it_setup 1

python3 -c 'import secrets; print("k1", secrets.token_hex(32))' >"$IT_DIR/keys"
chmod 600 "$IT_DIR/keys"
echo "admission.keys = $IT_DIR/keys" >>"$IT_DIR/flashsale.conf"
BROKERS=$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)
RATE=2
now_ms() { date +%s%3N; }
# admissions SKU: "STAMP EXPIRES_AT BUYER" for every admission result of SKU (STAMP: the
# broker's, the results topic being LogAppendTime).
admissions() {
	kcat -b "$BROKERS" -C -q -e -t "it.$IT_ID.results" -o beginning -f '%T %s\n' |
		python3 -c '
import json, sys
for line in sys.stdin:
    ts, _, body = line.partition(" ")
    try:
        r = json.loads(body)
    except ValueError:
        continue
    if r.get("type") == "admission" and r.get("sku") == sys.argv[1]:
        print(ts, r["expires_at"], r["buyer_id"])
' "$1"
}
admitted() { sql "SELECT count(admitted_ms) FROM room_joins WHERE sku = '$1'"; }
# live_tokens FILE RESTART [MIN_REMINTED]: every buyer with an admission result stamped at or
# after RESTART (ms) holds, in its last one, a token with at least 2,000 of its 3,000 ms left
# at the result's stamp (the bound: the worker's lag between the tick's stamp and the
# result's, ~10 ms on an idle machine); at least MIN_REMINTED buyers got two tokens (a re-mint
# after a stale tick; an admission published again carries the same one).
live_tokens() {
	python3 - "$@" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1])]
restart, need = int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0
rows = [(int(ts), int(exp), b) for ts, exp, b in rows]
after = [r for r in rows if r[0] >= restart]
last, tokens = {}, {}
for ts, exp, b in rows:
    tokens.setdefault(b, set()).add(exp)
    if b not in last or ts >= last[b][0]:
        last[b] = (ts, exp)
buyers = sorted({b for _, _, b in after})
dead = [ts - exp for ts, exp, _ in after if exp <= ts]
left = sorted(last[b][1] - last[b][0] for b in buyers)
short = [b for b in buyers if last[b][1] - last[b][0] < 2000]
reminted = [b for b in buyers if len(tokens[b]) > 1]
print(f"{len(after)} admission results after the restart, {len(dead)} dead on arrival"
      + (f" (worst by {max(dead)} ms)" if dead else "") + f"; {len(buyers)} buyers, "
      f"{len(reminted)} re-minted; the least life left in a buyer's last token: "
      f"{left[0] if left else '-'} ms; {len(short)} buyers under 2,000 ms: {short[:5]}")
sys.exit(0 if buyers and not short and len(reminted) >= need else 1)
EOF
}

outage() { # outage SECONDS: the wall clock passes SECONDS from now (the worker is stopped)
	local until=$(($(now_ms) + $1 * 1000))
	wait_until $(($1 + 5)) "the outage's $1 s" "[ \$(now_ms) -ge $until ]"
}

start_worker w1
wait_until 60 "w1 to be assigned its partition" "grep -q 'partition 0 assigned' '$IT_DIR/w1.log'"

# ---- 1. an idle outage -----------------------------------------------------------------------
fs sale open IDLE --stock 100 --per-buyer 1 --hold 600 --opens-at "$(now_ms)" \
	--admission-rate $RATE --token-seconds 3 --draw fifo --wait 30 >/dev/null || die "the sale IDLE"
fs load IDLE --buyers 60 --join --buyer-prefix idle >/dev/null || die "IDLE's joins"
wait_until 30 "IDLE's first admissions" "[ \$(admitted IDLE) -ge 2 ]"
stop_worker w1
before=$(admitted IDLE)
outage 8
restart=$(now_ms)
start_worker w2
wait_until 60 "IDLE's admissions after the restart" "[ \$(admitted IDLE) -ge $((before + 8)) ]"
admissions IDLE >"$IT_DIR/idle.txt"
python3 - "$IT_DIR/idle.txt" "$restart" <<'EOF' || fail "an idle outage's admissions came in a burst (above)"
import sys
# A buyer's first admission result only: a later one is a re-mint of its token (the ticks of
# the second before the outage), not an admission.
rows, seen = [], set()
for l in sorted(open(sys.argv[1]), key=lambda l: int(l.split()[0])):
    ts, _, buyer = l.split()
    if buyer not in seen:
        seen.add(buyer)
        rows.append(int(ts))
after = sorted(ts for ts in rows if ts >= int(sys.argv[2]))
first = [ts for ts in after if ts < after[0] + 1000]
print(f"idle outage: {len(first)} admissions in the first second after the restart "
      f"({len(after)} after it in all)")
sys.exit(0 if len(first) <= 5 else 1)
EOF
[ "$IT_FAILED" -ne 0 ] || say "ok: after an idle outage, admissions resume at the rate"

# ---- 2. an outage with traffic ---------------------------------------------------------------
fs sale open TRAF --stock 100 --per-buyer 1 --hold 600 --opens-at "$(now_ms)" \
	--admission-rate $RATE --token-seconds 3 --draw fifo --wait 30 >/dev/null || die "the sale TRAF"
fs load TRAF --buyers 60 --join --buyer-prefix traf >/dev/null || die "TRAF's joins"
wait_until 30 "TRAF's first admissions" "[ \$(admitted TRAF) -ge 2 ]"
stop_worker w2
# Joins keep arriving while the worker is down: each moves the partition's log clock.
until=$(($(now_ms) + 12000))
n=0
while [ "$(now_ms)" -lt "$until" ]; do
	fs join TRAF --buyer "late-$n" >/dev/null || die "a join during the outage"
	n=$((n + 1))
	sleep 0.25
done
say "$n joins during the 12 s outage"
restart=$(now_ms)
start_worker w3
wait_until 60 "TRAF's admissions after the restart" "[ \$(admissions TRAF | awk -v r=$restart '\$1 >= r' | wc -l) -ge 10 ]"
admissions TRAF >"$IT_DIR/traf.txt"
live_tokens "$IT_DIR/traf.txt" "$restart" || fail "admitted buyers got dead tokens (above)"
[ "$IT_FAILED" -ne 0 ] || say "ok: after an outage with traffic, admitted buyers get live tokens"

# ---- 3. a stale tick: appended by a worker that died before reading it ------------------------
fs sale open STALE --stock 100 --per-buyer 1 --hold 600 --opens-at "$(now_ms)" \
	--admission-rate $RATE --token-seconds 3 --draw fifo --wait 30 >/dev/null || die "the sale STALE"
fs load STALE --buyers 40 --join --buyer-prefix stale >/dev/null || die "STALE's joins"
wait_until 30 "STALE's first admissions" "[ \$(admitted STALE) -ge 2 ]"
stop_worker w3
start_worker w4 FLASHSALE_CRASH=after_tick:3
wait_until 60 "w4 to die after appending its third tick" \
	"grep -q 'crash point after_tick reached' '$IT_DIR/w4.log' && ! alive \$(worker_pid w4)"
outage 6
restart=$(now_ms)
start_worker w5
wait_until 60 "STALE's admissions after the restart" "[ \$(admissions STALE | awk -v r=$restart '\$1 >= r' | wc -l) -ge 8 ]"
for sku in IDLE TRAF STALE; do admissions $sku | sed "s|\$| $sku|"; done |
	awk '{ print $1, $2, $4 "/" $3 }' >"$IT_DIR/stale.txt"
live_tokens "$IT_DIR/stale.txt" "$restart" 1 || fail "a stale tick's buyers got dead tokens (above)"
[ "$IT_FAILED" -ne 0 ] || say "ok: a stale tick's buyers get fresh tokens"

stop_worker w5
audit_ok
fs replay --dry-run >"$IT_DIR/replay.txt" 2>&1 || {
	cat "$IT_DIR/replay.txt"
	fail "the replay differs"
}
say "ok: replay --dry-run clean"
it_done

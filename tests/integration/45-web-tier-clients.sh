#!/usr/bin/env bash
# Web tiers written with Kafka clients that are not ours (issue 26; docs/web-tier.md).
# Kafka's Java producer, kafkajs, kafka-python and franz-go (murmur2 by default: the rule),
# confluent-kafka (CRC32 by default) and sarama (FNV-1a by default) each
# publish 40 buyers for each of six SKUs of a 4-partition intents topic, more than any SKU's
# stock, with their default settings. The SKUs are ones the hashes place apart; where each
# client puts each SKU is computed here (tests/clients/partitions.py) and checked against
# where the client says it put each buy.
#   1. misrouted = forward (the default): every misrouted buy has one `forwards` row and is
#      decided on the SKU's partition; each SKU holds exactly its stock (the first client's
#      forwarded buys alone sell it out), no buy is unknown_sku, one decision per intent, every
#      decision and every answer on the rule's partition; the audit and `replay --dry-run` are
#      clean. Then confluent-kafka and sarama with the settings that match the rule: nothing
#      more is forwarded.
#   2. misrouted = reject: every misrouted buy is in rejects as wrong_partition (as many as
#      computed) and answered rejected / wrong_partition with its expected partition; the buys
#      on the right partition are decided as before, each SKU holds exactly its stock.
# And docs/web-tier.md's snippets are the files run here (tests/clients/check-snippets.py).
# A client that cannot run here (the Go ones without a Go as new as tests/clients/go/go.mod
# names) is left out, with a SKIP line.
. "$(dirname "$0")/lib.sh"
CLIENTS=$IT_ROOT/tests/clients
PARTS=4
SKUS=(SKU1 SKU2 SKU5 SKU6 SKU9 SKU12)
declare -A STOCK=([SKU1]=30 [SKU2]=20 [SKU5]=25 [SKU6]=35 [SKU9]=15 [SKU12]=10)
PER_SKU=40 # buyers per SKU from each client
NBUYS=$((PER_SKU * ${#SKUS[@]}))
# CLIENT:HASH, HASH naming the client's default partitioner (MUR the rule, CRC librdkafka's
# consistent_random, FNV sarama's). The two that misroute go first, so that their forwarded
# (or rejected) buys meet the whole stock.
DEFAULTS=(confluent:CRC sarama:FNV java:MUR kafkajs:MUR kafka-python:MUR franz-go:MUR)
RULE_VARIANTS=(confluent sarama) # the clients whose default is not the rule, set to match it

# The partition of each SKU under each hash: "SKU MUR CRC FNV" lines.
HASHES=$(/usr/bin/python3 "$CLIENTS/partitions.py" "$PARTS" "${SKUS[@]}") || die "partitions.py failed"
declare -A HCOL=([MUR]=2 [CRC]=3 [FNV]=4)
part_of() { awk -v s="$2" -v c="${HCOL[$1]}" '$1 == s { print $c }' <<<"$HASHES"; } # part_of HASH SKU
say "partitions (SKU murmur2 crc32 fnv1a): $(tr '\n' ';' <<<"$HASHES")"

CLIENTS_RUN=()
for c in "${DEFAULTS[@]}"; do
	if "$CLIENTS/run" --have "${c%%:*}"; then
		CLIENTS_RUN+=("$c")
	else
		say "SKIP: client ${c%%:*} is not set up here (scripts/setup says why)"
	fi
done
# The test proves nothing unless a client misroutes some SKUs and routes others right.
for c in "${CLIENTS_RUN[@]}"; do
	[ "${c#*:}" != MUR ] || continue
	mis=0
	for s in "${SKUS[@]}"; do [ "$(part_of "${c#*:}" "$s")" = "$(part_of MUR "$s")" ] || mis=$((mis + 1)); done
	[ "$mis" -gt 0 ] && [ "$mis" -lt ${#SKUS[@]} ] || die "${c%%:*}'s default misroutes $mis of ${#SKUS[@]} SKUs: choose other SKUs"
	say "ok: ${c%%:*}'s default partitioner misroutes $mis of ${#SKUS[@]} SKUs"
done
[ "${#CLIENTS_RUN[@]}" -gt 0 ] && [ "${CLIENTS_RUN[0]}" = confluent:CRC ] || die "confluent-kafka is not set up (scripts/setup)"

# publish NAME CLIENT HASH [VAR=VALUE...]: NAME's buys from CLIENT (buyer ids NAME-1 ...),
# its lines (INTENT_ID SKU PARTITION OFFSET) in $IT_DIR/NAME.out; each on the partition that
# HASH names for its SKU.
publish() {
	local name=$1 client=$2 hash=$3 t0 bad
	shift 3
	t0=$(date +%s%3N)
	env "$@" "$CLIENTS/run" "$client" "$BROKERS" "it.$IT_ID.intents" "$name" "$PER_SKU" "${SKUS[@]}" \
		>"$IT_DIR/$name.out" 2>"$IT_DIR/$name.log" || die "$name: the client failed (see $IT_DIR/$name.log)"
	say "$name: $(wc -l <"$IT_DIR/$name.out") buys published in $(($(date +%s%3N) - t0)) ms"
	assert_eq "$NBUYS" "$(wc -l <"$IT_DIR/$name.out")" "$name: buys delivered"
	bad=$(awk -v c="${HCOL[$hash]}" 'NR == FNR { p[$1] = $c; next } $3 != p[$2]' <(printf '%s\n' "$HASHES") "$IT_DIR/$name.out" | wc -l)
	assert_eq 0 "$bad" "$name: buys not on the partition its partitioner ($hash) names"
	printf '%s\n' "$name" >>"$IT_DIR/published"
}
# outs: every published buy (INTENT_ID SKU PARTITION OFFSET RULE_PARTITION).
outs() {
	local n files=()
	while read -r n; do files+=("$IT_DIR/$n.out"); done <"$IT_DIR/published"
	awk 'NR == FNR { m[$1] = $2; next } { print $0, m[$2] }' <(printf '%s\n' "$HASHES") "${files[@]}"
}
n_decisions() { sql "SELECT count(*) FROM decisions"; }
n_wrong() { sql "SELECT coalesce(sum(off_end - off + 1), 0) FROM rejects WHERE reason = 'wrong_partition'"; }

# setup_phase: a database, topics and a worker that has its partitions; the sales open.
setup_phase() {
	it_setup "$PARTS"
	BROKERS=$(grep '^brokers' "$IT_DIR/flashsale.conf" | cut -d' ' -f3)
	: >"$IT_DIR/published"
	start_worker w1
	wait_until 60 "w1 to be assigned partitions" "grep -q 'partition [0-9]* assigned' '$IT_DIR/w1.log'"
	for s in "${SKUS[@]}"; do fs sale open "$s" --stock "${STOCK[$s]}" >/dev/null; done
}

# held_each [SKU...]: each SKU (all by default) holds exactly its stock.
held_each() {
	local s list=("$@")
	[ $# -gt 0 ] || list=("${SKUS[@]}")
	for s in "${list[@]}"; do
		assert_eq "${STOCK[$s]}|0" "$(sql "SELECT held, available FROM skus WHERE sku = '$s'")" "$s held|available"
	done
}

# common_checks: what both modes share once every buy is decided.
common_checks() {
	local s
	# The clients put each buy where they said (read back from the topic: partition, offset, key).
	kcat -b "$BROKERS" -C -q -e -t "it.$IT_ID.intents" -o beginning -f '%p %o %k %s\n' |
		awk 'match($0, /"intent_id":"[^"]*"/) { print substr($0, RSTART + 13, 36), $3, $1, $2 }' | sort >"$IT_DIR/topic.txt"
	assert_eq 0 "$(outs | awk '{ print $1, $2, $3, $4 }' | sort | comm -23 - "$IT_DIR/topic.txt" | wc -l)" "buys not on the topic where their client said"
	held_each
	assert_eq 0 "$(sql "SELECT count(*) FROM decisions WHERE reason = 'unknown_sku'")" "decisions unknown_sku"
	for s in "${SKUS[@]}"; do
		assert_eq "$(part_of MUR "$s")" "$(sql "SELECT string_agg(DISTINCT part::text, ',') FROM decisions WHERE sku = '$s'")" "$s: the partitions of its decisions"
		assert_eq "$(part_of MUR "$s")" "$(sql "SELECT part FROM skus WHERE sku = '$s'")" "$s: its sale's partition"
	done
	# A buy that arrived on the rule's partition is decided at its own offset.
	outs | awk '$3 == $5 { print $1 "|" $3 "|" $4 }' | sort >"$IT_DIR/right.txt"
	sql "SELECT intent_id, part, off FROM decisions" | sort >"$IT_DIR/decided.txt"
	assert_eq 0 "$(comm -23 "$IT_DIR/right.txt" "$IT_DIR/decided.txt" | wc -l)" "rightly routed buys not decided at their own offset"
	grep -qi 'murmur2' "$IT_DIR/w1.log" && say "ok: the worker's log names the fix (murmur2)" ||
		fail "no line in the worker's log names the fix (set the producer's partitioner to murmur2)"
}

# answers: every answer on the results topic to a buy, as "INTENT_ID OUTCOME REASON PARTITION
# EXPECTED_PARTITION" lines (the intent id from the payload, whatever the key).
answers() {
	results_dump | /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if isinstance(r, dict) and r.get("intent_id"):
        print(r["intent_id"], r.get("outcome"), r.get("reason", "-"), r.get("partition", "-"), r.get("expected_partition", "-"))
' | sort -u
}
n_answered() { answers | awk '{ print $1 }' | sort -u | comm -12 - "$IT_DIR/ids.txt" | wc -l; }

# answered N: every one of the N buys has its answer; the answers in $IT_DIR/answers.txt.
answered() {
	outs | awk '{ print $1 }' | sort -u >"$IT_DIR/ids.txt"
	assert_eq "$1" "$(wc -l <"$IT_DIR/ids.txt")" "distinct intent ids published"
	wait_until 60 "$1 buys answered" "[ \$(n_answered) -ge $1 ]"
	answers >"$IT_DIR/answers.txt"
}

# clean_end: the worker stopped, the one checker and the replay agree.
clean_end() {
	stop_worker w1
	audit_ok
	if fs replay --dry-run >"$IT_DIR/dry.txt" 2>&1 && grep -q ' 0 differences' "$IT_DIR/dry.txt"; then
		say "ok: replay --dry-run: $(tail -n 1 "$IT_DIR/dry.txt")"
	else
		cat "$IT_DIR/dry.txt"
		fail "replay --dry-run found differences"
	fi
}

# publish_defaults: every client but the first (which each phase runs alone), with its default
# partitioner.
publish_defaults() {
	local c name
	for c in "${CLIENTS_RUN[@]:1}"; do
		name=${c%%:*}
		[ "${c#*:}" = MUR ] || name+=-default
		publish "$name" "${c%%:*}" "${c#*:}" CLIENT_DEFAULT_PARTITIONER=1
	done
}

forward_phase() {
	local name total mis
	say "== misrouted = forward (the default)"
	setup_phase
	# The first client alone: its forwarded buys are decided like any other, so with more
	# buyers than stock each SKU sells out, the misrouted ones to forwarded buys.
	publish confluent-default confluent CRC CLIENT_DEFAULT_PARTITIONER=1
	wait_until 60 "confluent's $NBUYS buys decided" "[ \$(n_decisions) -ge $NBUYS ]"
	held_each
	publish_defaults
	total=$(outs | wc -l)
	fs wait --timeout 60 --quiet || die "records not decided in time"
	wait_until 60 "$total decisions" "[ \$(n_decisions) -ge $total ]"
	outs | awk '$3 != $5 { print $3 "|" $4 "|" $5 }' | sort >"$IT_DIR/misrouted.txt"
	mis=$(wc -l <"$IT_DIR/misrouted.txt")
	[ "$mis" -gt 0 ] || fail "no buy was misrouted: the test proves nothing"
	say "$mis of $total buys misrouted by the clients' defaults"
	sql "SELECT part, off, to_part FROM forwards" | sort >"$IT_DIR/forwards.txt"
	assert_eq "$mis" "$(wc -l <"$IT_DIR/forwards.txt")" "forwards rows"
	assert_eq 0 "$(comm -3 "$IT_DIR/misrouted.txt" "$IT_DIR/forwards.txt" | wc -l)" "misrouted buys (partition|offset|rule's partition) without their forwards row, or rows for no such buy"

	# The clients whose default is not the rule, with the settings that match it.
	for name in "${RULE_VARIANTS[@]}"; do
		"$CLIENTS/run" --have "$name" || continue
		publish "$name-rule" "$name" MUR
	done
	total=$(outs | wc -l)
	fs wait --timeout 60 --quiet || die "records not decided in time"
	wait_until 60 "$total decisions" "[ \$(n_decisions) -ge $total ]"
	assert_eq "$mis" "$(sql "SELECT count(*) FROM forwards")" "forwards rows after the matching settings (none more)"

	common_checks
	outs | awk '{ print $1 "|" $2 "|" $5 }' | sort >"$IT_DIR/want.txt"
	sql "SELECT intent_id, sku, part FROM decisions" | sort >"$IT_DIR/got.txt"
	assert_eq "$total" "$(wc -l <"$IT_DIR/got.txt")" "decisions (one per intent)"
	assert_eq 0 "$(comm -3 "$IT_DIR/want.txt" "$IT_DIR/got.txt" | wc -l)" "intents without their decision on the rule's partition, or decisions of no intent"
	answered "$total"
	# Every answer, a forwarded buy's too, names the rule's partition: where it was decided.
	assert_eq 0 "$(outs | awk 'NR == FNR { p[$1] = $5; next } ($1 in p) && $4 != p[$1]' - "$IT_DIR/answers.txt" | wc -l)" "answers naming another partition"
	clean_end
	it_done
}

reject_phase() {
	local right mis
	say "== misrouted = reject"
	IT_CONF_EXTRA="${IT_CONF_EXTRA:+$IT_CONF_EXTRA
}misrouted = reject"
	setup_phase
	# The first client alone: the SKUs it routes right sell out to it, the others sell nothing.
	publish confluent-default confluent CRC CLIENT_DEFAULT_PARTITIONER=1
	right=$(outs | awk '$3 == $5' | wc -l)
	mis=$((NBUYS - right))
	wait_until 60 "confluent's $right rightly routed buys decided" "[ \$(n_decisions) -ge $right ]"
	wait_until 60 "confluent's $mis misrouted buys rejected" "[ \$(n_wrong) -ge $mis ]"
	for s in "${SKUS[@]}"; do
		if [ "$(part_of CRC "$s")" = "$(part_of MUR "$s")" ]; then
			held_each "$s"
		else
			assert_eq "0|${STOCK[$s]}" "$(sql "SELECT held, available FROM skus WHERE sku = '$s'")" "$s (misrouted by confluent) held|available"
		fi
	done
	publish_defaults
	right=$(outs | awk '$3 == $5' | wc -l)
	mis=$(outs | awk '$3 != $5' | wc -l)
	[ "$mis" -gt 0 ] || fail "no buy was misrouted: the test proves nothing"
	say "$mis of $((right + mis)) buys misrouted by the clients' defaults"
	fs wait --timeout 60 --quiet || die "records not decided in time"
	wait_until 60 "$right decisions" "[ \$(n_decisions) -ge $right ]"
	wait_until 60 "$mis wrong_partition rejects" "[ \$(n_wrong) -ge $mis ]"

	common_checks
	assert_eq "$mis" "$(n_wrong)" "wrong_partition rejects (as computed)"
	outs | awk '$3 != $5 { print $3 "|" $4 }' | sort >"$IT_DIR/misrouted.txt"
	sql "SELECT part, g FROM rejects, generate_series(off, off_end) g WHERE reason = 'wrong_partition'" | sort >"$IT_DIR/rejects.txt"
	assert_eq 0 "$(comm -3 "$IT_DIR/misrouted.txt" "$IT_DIR/rejects.txt" | wc -l)" "misrouted buys (partition|offset) not rejected wrong_partition, or rejects of no such buy"
	assert_eq 0 "$(sql "SELECT count(*) FROM forwards")" "forwards rows"
	# Only the rightly routed buys are decided, each once, where they arrived.
	outs | awk '$3 == $5 { print $1 "|" $2 "|" $3 "|" $4 }' | sort >"$IT_DIR/want.txt"
	sql "SELECT intent_id, sku, part, off FROM decisions" | sort >"$IT_DIR/got.txt"
	assert_eq "$right" "$(wc -l <"$IT_DIR/got.txt")" "decisions (one per rightly routed intent)"
	assert_eq 0 "$(comm -3 "$IT_DIR/want.txt" "$IT_DIR/got.txt" | wc -l)" "rightly routed intents without their decision, or decisions of no such intent"
	answered "$((right + mis))"
	# A misrouted buy's answer says why, and where it belongs.
	outs | awk '$3 != $5 { print $1, "rejected", "wrong_partition", $3, $5 }' | sort >"$IT_DIR/want-answers.txt"
	assert_eq 0 "$(comm -23 "$IT_DIR/want-answers.txt" "$IT_DIR/answers.txt" | wc -l)" "misrouted buys not answered 'rejected wrong_partition' with their expected partition"
	clean_end
	it_done
}

(forward_phase)
(reject_phase)
# docs/web-tier.md's snippets are the files that ran above.
if out=$(/usr/bin/python3 "$CLIENTS/check-snippets.py" 2>&1); then
	say "ok: docs/web-tier.md snippets are the tested files ($(grep -c ': ok ' <<<"$out") snippets)"
else
	printf '%s\n' "$out"
	fail "docs/web-tier.md snippets differ from tests/clients"
fi
it_done

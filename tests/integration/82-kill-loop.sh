#!/usr/bin/env bash
# A long random kill -9 loop: two workers, four partitions, a sale running at a steady rate,
# and every 7-11 s one worker killed and restarted (seeded: FLASHSALE_SEED=N repeats a run).
# At the end every record is decided exactly once and the checker passes.
. "$(dirname "$0")/lib.sh"
seed=${FLASHSALE_SEED:-$(($(date +%s) % 100000))}
RANDOM=$seed
say "seed $seed (FLASHSALE_SEED=$seed repeats the schedule)"
kills=${FLASHSALE_KILLS:-6}
it_setup 4
echo "batch.max = 200" >>"$IT_DIR/flashsale.conf"
for i in 1 2 3 4; do fs sale open "K-$i" --stock 700 >/dev/null; done
start_worker a0
start_worker b0
loads=()
for i in 1 2 3 4; do
	fs load "K-$i" --buyers 6000 --rate 100 --seed "$seed$i" --ids "$IT_DIR/ids-$i" >/dev/null &
	loads+=($!)
done
gen_a=0
gen_b=0
for k in $(seq 1 "$kills"); do
	sleep "$((RANDOM % 5 + 7))" # 7 to 11 s: past the 6 s session timeout, so the group settles and works between kills
	if [ $((RANDOM % 2)) -eq 0 ]; then
		kill_worker "a$gen_a"
		gen_a=$((gen_a + 1))
		start_worker "a$gen_a"
		say "kill $k: worker a restarted (a$gen_a), $(decided) records decided"
	else
		kill_worker "b$gen_b"
		gen_b=$((gen_b + 1))
		start_worker "b$gen_b"
		say "kill $k: worker b restarted (b$gen_b), $(decided) records decided"
	fi
done
for p in "${loads[@]}"; do wait "$p" || die "load failed"; done
fs wait --quiet --timeout 240 || die "records not decided after the kill loop"
for i in 1 2 3 4; do
	assert_eq "700|5300" "$(sql "SELECT count(*) FILTER (WHERE outcome = 'held'), count(*) FILTER (WHERE outcome = 'sold_out') FROM decisions WHERE sku = 'K-$i'")" "K-$i held|sold_out"
	sql "SELECT intent_id FROM decisions WHERE sku = 'K-$i'" | sort >"$IT_DIR/decided"
	assert_eq 0 "$(sort -u "$IT_DIR/ids-$i" | comm -3 - "$IT_DIR/decided" | wc -l)" "K-$i ids sent vs decided"
done
cat "$IT_DIR"/ids-* | sort -u >"$IT_DIR/all-ids"
wait_until 120 "every intent answered" "[ \$(results_keys | sort -u | comm -12 - '$IT_DIR/all-ids' | wc -l) -ge 24000 ]"
say "ok: every intent answered"
stop_worker "a$gen_a"
stop_worker "b$gen_b"
audit_ok
it_done

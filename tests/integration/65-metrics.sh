#!/usr/bin/env bash
# The metrics of the worker and the gateway (issue 30), scraped by the real Prometheus during a
# sale. Both endpoints pass promtool check metrics and match docs/reference/metrics.md; a sale
# through the gateway and one published to Kafka directly (with repeats and poison records) are
# counted by Prometheus exactly as Postgres recorded them (decisions, holds, rejects,
# duplicates, records per partition), and the gateway's requests as its buyers sent them; a
# session holding the partition's lock makes commits fail, and the shipped alert
# FlashsaleCommitsFailing fires (its `for:` cut to 1 s), then clears once the lock is gone.
. "$(dirname "$0")/lib.sh"
IT_CONF_EXTRA="metrics.listen = 127.0.0.1:0"
it_setup 2
start_worker w1
W1=http://127.0.0.1:$(metrics_port w1)
it_admin_token
start_gateway gw --set admin.token.file="$IT_DIR/admin-token"
GWM=http://127.0.0.1:$(metrics_port gw)
J='Content-Type: application/json'
assert_eq 200 "$(curl -s -o /dev/null -w '%{http_code}' "$W1/healthz")" "the worker's /healthz"
assert_eq 404 "$(curl -s -o /dev/null -w '%{http_code}' "$W1/nothing")" "an unknown path on the metrics port"
assert_eq 405 "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$W1/metrics")" "POST /metrics"

# More descriptors than select() takes (FD_SETSIZE, 1024) open in the gateway, as in a sale:
# its metrics port still answers (it polls; select() would close the scrape's socket).
python3 - "${GW##*:}" "$GWM" <<-'PY' || fail "the metrics port with 1,100 buyers connected"
	import json, resource, socket, sys, time, urllib.request
	soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
	resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
	port = int(sys.argv[1])
	held = [socket.create_connection(("127.0.0.1", port)) for _ in range(1100)]
	# Accepted by the gateway (each a descriptor of its own) before the scrape.
	deadline = time.monotonic() + 20
	while True:
	    with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=5) as r:
	        if json.load(r)["connections"] > 1100:
	            break
	    assert time.monotonic() < deadline, "the gateway did not accept 1,100 connections"
	    time.sleep(0.1)
	with urllib.request.urlopen(sys.argv[2] + "/metrics", timeout=10) as r:
	    assert r.status == 200 and b"flashsale_gateway_connections" in r.read()
	print("ok: the gateway's /metrics answered with 1,100 buyers connected")
	for h in held:
	    h.close()
PY
prom_up
prom_targets flashsale-worker "127.0.0.1:${W1##*:}"
prom_targets flashsale-gateway "127.0.0.1:${GWM##*:}"
prom_wait_value 30 "min(up{it=\"$IT_ID\"})" 1
prom_wait_value 30 "count(up{it=\"$IT_ID\"})" 2

# ---- a sale through the gateway, another published to Kafka directly ----
assert_eq 202 "$(req POST /v1/skus/WEB/open -H "$J" -H "Authorization: Bearer $TOKEN" -d '{"stock":40}')" "open WEB over HTTP"
fs sale open DIRECT --stock 300 --per-buyer 1 --wait 30 >/dev/null || die "open DIRECT"
wait_until 30 "WEB's stock record at the gateway" "[ \$(req GET /v1/skus/WEB) = 200 ]"
python3 "$IT_ROOT/tests/clients/gateway_load.py" --url "$GW" --sku WEB --buyers 150 --threads 16 \
	--wait 30 --out "$IT_DIR/web.jsonl" >"$IT_DIR/web.out" || die "gateway_load failed: $(cat "$IT_DIR/web.out")"
assert_eq "buyers=150 accepted=150 decided=150 failed=0" "$(tail -n 1 "$IT_DIR/web.out" | cut -d' ' -f1-4)" "WEB's buyers answered"
fs load DIRECT --buyers 2000 --dup-count 100 --poison 200 --seed 30 >/dev/null || die "load DIRECT"
fs wait --quiet --timeout 120 || die "records not decided"

# Both endpoints while the sale's numbers are in them.
prom_check_metrics "$W1/metrics"
prom_check_metrics "$GWM/metrics"

# ---- Prometheus against Postgres ----
q() { prom_query "$1" | cut -d. -f1; } # a sum, printed as Prometheus does (1e+03 is not used below 1e21)
held=$(sql "SELECT count(*) FROM decisions WHERE outcome = 'held'")
decided=$(sql "SELECT count(*) FROM decisions")
poison=$(sql "SELECT coalesce(sum(off_end - off + 1), 0) FROM rejects")
rejected=$(sql "SELECT count(*) FROM decisions WHERE outcome = 'rejected'")
records=$(sql "SELECT sum(n_records) FROM partitions")
assert_eq 340 "$held" "units held in Postgres (40 + 300)"
[ "$poison" -ge 200 ] || fail "poison records rejected: $poison"
# Prometheus's last scrape has every batch once it counts every record Postgres has: a batch's
# counters move together on the worker's main thread, and one scrape is one text.
prom_wait_value 30 "sum(flashsale_partition_records_total{it=\"$IT_ID\"})" "$records"
assert_eq "$held" "$(q "sum(flashsale_decisions_total{it=\"$IT_ID\",outcome=\"held\"})")" "holds (Prometheus, Postgres)"
assert_eq "$decided" "$(q "sum(flashsale_decisions_total{it=\"$IT_ID\",type=~\"buy|confirm|cancel\"})")" "decisions (Prometheus, Postgres)"
assert_eq "$poison" "$(q "sum(flashsale_decisions_total{it=\"$IT_ID\",type=\"invalid\"})")" "invalid records (Prometheus, Postgres's rejects)"
assert_eq "$((poison + rejected))" "$(q "sum(flashsale_rejects_total{it=\"$IT_ID\"})")" "rejects by reason, summed"
assert_eq "$poison" "$(q "sum(flashsale_rejects_total{it=\"$IT_ID\",reason=\"bad_json\"})")" "poison records rejected bad_json"
assert_eq 100 "$(q "sum(flashsale_duplicates_total{it=\"$IT_ID\"})")" "repeats answered"
assert_eq 2 "$(q "sum(flashsale_decisions_total{it=\"$IT_ID\",type=\"open\",outcome=\"applied\"})")" "sale records applied"
assert_eq "$held" "$(q "sum(flashsale_holds_live{it=\"$IT_ID\"})")" "holds live"
assert_eq 0 "$(q "sum(flashsale_partition_lag_records{it=\"$IT_ID\"})")" "lag once all is decided"
assert_eq 2 "$(q "sum(flashsale_assigned_partitions{it=\"$IT_ID\"})")" "partitions assigned"
batches=$(q "sum(flashsale_batch_commit_seconds_count{it=\"$IT_ID\"})")
[ "$batches" -gt 0 ] && [ "$batches" = "$(q "sum(flashsale_batch_records_count{it=\"$IT_ID\"})")" ] &&
	say "ok: $batches batches, each with its commit time" || fail "batches: $batches"
# The gateway: every buyer's POST counted by its answer, the edge answers and the published.
count() { python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if eval(sys.argv[2], {}, json.loads(l))))' "$IT_DIR/web.jsonl" "$1"; }
web_published=$(count published) # on the log: a 202, or a 200 with a decision not the edge's
web_202=$(count 'post == 202')
prom_wait_value 30 "sum(flashsale_gateway_requests_total{it=\"$IT_ID\",route=\"buy\"})" 150
assert_eq "$web_202" "$(q "sum(flashsale_gateway_requests_total{it=\"$IT_ID\",route=\"buy\",code=\"202\"})")" "buys answered 202"
assert_eq "$((150 - web_published))" "$(q "sum(flashsale_gateway_edge_answers_total{it=\"$IT_ID\",outcome=\"sold_out\"})")" "buys answered at the edge"
assert_eq "$((web_published + 1))" "$(q "sum(flashsale_gateway_published_total{it=\"$IT_ID\"})")" "records the gateway published (its buys and the open)"
assert_eq "$web_published" "$(sql "SELECT count(*) FROM decisions WHERE sku = 'WEB'")" "WEB's decisions in Postgres"
assert_eq "$web_202" "$(q "sum(flashsale_gateway_request_duration_seconds_count{it=\"$IT_ID\",route=\"intent\"})")" "long-polls timed (the buyers answered 202 wait for their decision)"
assert_eq 1 "$(q "flashsale_gateway_ready{it=\"$IT_ID\"}")" "the gateway ready"

# ---- an alert, firing: commits fail while a session holds partition 0's lock ----
part=$(sql "SELECT part FROM skus WHERE sku = 'DIRECT'")
psql "$IT_PG" -X -q -c "BEGIN; SELECT 1 FROM partitions WHERE part = $part FOR UPDATE; SELECT pg_sleep(14); COMMIT;" >/dev/null 2>&1 &
locker=$!
wait_until 10 "the lock to be taken" "[ \$(sql \"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%pg_sleep(14)%' AND pid <> pg_backend_pid()\") -ge 1 ]"
fs sale restock DIRECT --add 10 >/dev/null
prom_wait_alert 30 FlashsaleCommitsFailing "it=\"$IT_ID\",cause=\"sql_error\""
wait "$locker" || true
fs wait --quiet --timeout 60 || die "the restock was not decided after the lock"
[ "$(q "sum(flashsale_transactions_failed_total{it=\"$IT_ID\",cause=\"sql_error\"})")" -ge 1 ] &&
	say "ok: lock timeouts counted (cause sql_error)" || fail "no lock timeout counted"
prom_wait_value 40 "count(ALERTS{alertname=\"FlashsaleCommitsFailing\",alertstate=\"firing\",it=\"$IT_ID\"}) or vector(0)" 0

kill -TERM "$(worker_pid gw)"
stop_worker w1
audit_ok
it_done

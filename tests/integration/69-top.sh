#!/usr/bin/env bash
# flashsale top on the real services: two workers, each with its metrics endpoint and one of
# the two partitions, and a gateway's endpoint. A sale on both partitions under a load
# published at a rate: top's snapshot in the middle sees batches committed and decisions per
# second; once all is decided, its SKUs are Postgres's skus rows, its partitions Postgres's
# partitions rows (lag 0, each from the worker that has it), its commit counts the workers'
# own. Endpoints that are down, hang or serve bad text are reported and top still exits 0
# in bounded time; on a terminal, q, Ctrl-C and SIGTERM end it with the terminal restored.
. "$(dirname "$0")/lib.sh"
it_setup 2

# metrics_port LOG: the port of the "metrics: listening on ADDR (port N)" line of a log.
metrics_port() { sed -n 's/.*metrics: listening on .* (port \([0-9]*\)).*/\1/p' "$1" | tail -n 1; }

# start_metrics_worker NAME: a worker with a metrics endpoint on a free port; sets M_NAME to
# its URL once its log says where it listens (lib.sh's start_worker passes no options).
start_metrics_worker() {
	local name=$1
	"$IT_BUILD/flashsale-worker" -c "$IT_DIR/flashsale.conf" --set metrics.listen=127.0.0.1:0 \
		>>"$IT_DIR/$name.log" 2>&1 &
	eval "IT_PID_$name=$!"
	IT_PIDS+=($!)
	wait_until 30 "worker $name's metrics endpoint" "grep -q 'metrics: listening on' '$IT_DIR/$name.log'"
	eval "M_$name=http://127.0.0.1:$(metrics_port "$IT_DIR/$name.log")"
}

# start_metrics_gateway NAME: a gateway on free ports for HTTP and metrics; sets GW and M_NAME.
start_metrics_gateway() {
	local name=$1 log=$IT_DIR/$1.log
	"$IT_BUILD/flashsale-gateway" -c "$IT_DIR/flashsale.conf" --set listen=127.0.0.1:0 \
		--set metrics.listen=127.0.0.1:0 >>"$log" 2>&1 &
	eval "IT_PID_$name=$!"
	IT_PIDS+=($!)
	wait_until 30 "gateway $name to listen" "grep -q 'info: listening on' '$log' && grep -q 'metrics: listening on' '$log'"
	GW=http://127.0.0.1:$(sed -n 's/.*info: listening on .* (port \([0-9]*\)).*/\1/p' "$log" | tail -n 1)
	eval "M_$name=http://127.0.0.1:$(metrics_port "$log")"
}

# top_json FILE ARGS...: `flashsale top --once --json ARGS` into FILE; its exit status in
# TOP_RC (124: killed after 60 s) and its time in TOP_MS.
top_json() {
	local out=$1 t0
	shift
	t0=$(date +%s%3N)
	TOP_RC=0
	timeout 60 "$IT_BUILD/flashsale" -c "$IT_DIR/flashsale.conf" top --once --json "$@" \
		>"$out" 2>"$out.err" || TOP_RC=$?
	TOP_MS=$(($(date +%s%3N) - t0))
	[ ! -s "$out.err" ] || fail "top said on stderr: $(head -c 500 "$out.err")"
}

# jv FILE EXPR: a Python expression over the JSON object j of FILE (printed; True/False as is).
jv() { python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# Usage: --help answers; a bad option value, SKU or too many endpoints is one line, exit 2.
usage_rc() {
	local rc=0
	fs top "$@" >"$IT_DIR/usage.out" 2>"$IT_DIR/usage.err" || rc=$?
	echo "$rc $(wc -l <"$IT_DIR/usage.err")"
}
assert_eq "0 0" "$(usage_rc --help)" "top --help"
grep -q '^usage: flashsale top' "$IT_DIR/usage.out" || fail "top --help: $(head -n 1 "$IT_DIR/usage.out")"
assert_eq "2 1" "$(usage_rc --once --interval 5)" "top --interval 5"
assert_eq "2 1" "$(usage_rc --once 'no spaces')" "top with a bad SKU"
assert_eq "2 1" "$(usage_rc --once --metrics "$(seq -s, -f '127.0.0.1:%g' 1 17)")" "top with 17 endpoints"

# A port nothing listens on (bound, then closed).
closed_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

start_metrics_worker w1
start_metrics_worker w2
start_metrics_gateway gw
W="$M_w1,$M_w2"

# The group settles with a partition each (top says which worker has which).
split_ok() {
	top_json "$IT_DIR/split.json" --interval 100 --metrics "$W" &&
		[ "$(jv "$IT_DIR/split.json" "sorted((p['partition'], p['worker']) for p in j['partitions']) == [(0, '$M_w1/metrics'), (1, '$M_w2/metrics')] or sorted((p['partition'], p['worker']) for p in j['partitions']) == [(0, '$M_w2/metrics'), (1, '$M_w1/metrics')]")" = True ]
}
wait_until 60 "each worker to report one partition of the two" split_ok
say "ok: each worker reports one partition"

# PHONE and HOT: murmur2 puts them on partitions 0 and 1 of 2 (checked below on the stock topic).
fs sale open PHONE --stock 300 --wait 30 >/dev/null || die "open PHONE"
fs sale open HOT --stock 200 --wait 30 >/dev/null || die "open HOT"

# ---- under load: batches in the interval, decisions per second ----------------------------
fs load PHONE --buyers 3000 --rate 1000 --seed 691 >/dev/null &
load1=$!
fs load HOT --buyers 3000 --rate 1000 --seed 692 >/dev/null &
load2=$!
wait_until 60 "the load to be under way" "[ \$(decided) -ge 200 ]"
top_json "$IT_DIR/during.json" --interval 1000 --metrics "$W"
assert_eq 0 "$TOP_RC" "top's exit status under load"
assert_eq True "$(jv "$IT_DIR/during.json" "j['commits']['interval']['batches'] > 0")" "batches committed in the interval, under load"
assert_eq True "$(jv "$IT_DIR/during.json" "j['commits']['interval']['mean_ms'] > 0 and 0 < j['commits']['interval']['p99_ms'] <= 10000")" "the interval's mean and p99 commit times"
assert_eq True "$(jv "$IT_DIR/during.json" "j['totals']['rate'] > 0 and sum(p['rate'] for p in j['partitions']) > 0")" "decisions per second, under load"
assert_eq True "$(jv "$IT_DIR/during.json" "sum(j['decisions'].values()) > 0")" "decisions by outcome in the interval"
assert_eq True "$(jv "$IT_DIR/during.json" "0.9 <= j['interval_s'] <= 5")" "the interval between the two scrapes"
wait "$load1" || die "load PHONE"
wait "$load2" || die "load HOT"
fs wait --timeout 120 --quiet || die "records not decided in time"

# ---- the gateway: requests, an edge answer ------------------------------------------------
wait_until 30 "the gateway to see HOT sold out" "[ \"\$(req GET /v1/skus/HOT)\" = 200 ] && grep -q sold_out '$IT_DIR/body'"
for _ in 1 2 3; do req GET /v1/skus/PHONE >/dev/null; done
assert_eq 200 "$(req POST /v1/skus/HOT/buys -H 'Content-Type: application/json' -d '{"buyer_id": "late", "qty": 1}')" "a buy of HOT at the gateway"
assert_eq sold_out "$(body_field outcome)" "the edge answer"

# ---- all decided: top against Postgres ----------------------------------------------------
top_json "$IT_DIR/after.json" --metrics "$W,$M_gw,http://127.0.0.1:$closed_port"
A=$IT_DIR/after.json
assert_eq 0 "$TOP_RC" "top's exit status with an endpoint down"
for sku in PHONE HOT; do
	assert_eq "$(sql "SELECT available || '|' || held || '|' || sold || '|' || supply FROM skus WHERE sku = '$sku'")" \
		"$(jv "$A" "[f\"{s['available']}|{s['held']}|{s['sold']}|{s['supply']}\" for s in j['skus'] if s['sku'] == '$sku'][0]")" \
		"$sku available|held|sold|supply, top against Postgres"
done
assert_eq sold_out "$(jv "$A" "[s['status'] for s in j['skus'] if s['sku'] == 'HOT'][0]")" "HOT's status"
assert_eq "0 1" "$(jv "$A" "' '.join(str(s['partition']) for s in sorted(j['skus'], key=lambda s: s['partition']))")" "the SKUs' partitions"
assert_eq True "$(jv "$A" "j['stock']['read'] and j['stock']['skus'] == 2 and j['stock']['bad'] == 0")" "the stock topic read to its end"
assert_eq "0 1" "$(jv "$A" "' '.join(str(p['partition']) for p in j['partitions'])")" "partitions listed"
assert_eq "0 0" "$(jv "$A" "' '.join(str(p['lag']) for p in j['partitions'])")" "lag once all is decided"
assert_eq "$(sql "SELECT string_agg(part || ':' || n_records || ':' || next_offset, ' ' ORDER BY part) FROM partitions")" \
	"$(jv "$A" "' '.join(f\"{p['partition']}:{p['records']}:{p['next_offset']}\" for p in j['partitions'])")" \
	"partition:records:next offset, top against Postgres"
assert_eq "$(decided)" "$(jv "$A" "sum(p['records'] for p in j['partitions'])")" "records over the partitions"
assert_eq "$(decided)" "$(jv "$A" "j['totals']['records']")" "records over the workers"
assert_eq True "$(jv "$A" "len({p['worker'] for p in j['partitions']}) == 2 and all(p['also_reported_by'] == 0 for p in j['partitions'])")" "each partition from its one worker"
assert_eq "$(sql "SELECT count(*) FROM reservations WHERE status = 'held'")" "$(jv "$A" "j['totals']['holds_live']")" "holds live, top against Postgres"
# The batches since the workers started are the sum of their own histograms' counts.
batches=0
for m in "$M_w1" "$M_w2"; do
	n=$(curl -s "$m/metrics" | awk '$1 == "flashsale_batch_commit_seconds_count" { print $2 }')
	batches=$((batches + n))
done
assert_eq True "$(jv "$A" "j['commits']['total']['batches'] == $batches and $batches > 0")" "batches since start = the workers' counts ($batches)"
assert_eq True "$(jv "$A" "'batches' in j['commits']['interval'] and j['commits']['total']['p99_ms'] > 0")" "the commit latency block"
# The endpoints: the workers with their partitions, the gateway, the closed port down.
assert_eq "worker worker gateway down" "$(jv "$A" "' '.join(e['role'] for e in j['endpoints'])")" "endpoint roles"
assert_eq "[0, 1]" "$(jv "$A" "sorted(sum((e.get('partitions', []) for e in j['endpoints']), []))")" "partitions over the workers' endpoints"
assert_eq True "$(jv "$A" "not j['endpoints'][3]['up'] and 'connect' in j['endpoints'][3]['error'].lower()")" "the closed port reported down"
assert_eq True "$(jv "$A" "j['gateway']['requests'] >= 5 and j['gateway']['edge_answers']['sold_out'] >= 1 and j['gateway']['waiting']['long_poll'] == 0")" "the gateway's requests, edge answers and waiting requests"

# With a short interval too, the SKUs are those of the whole topic: --once reads it to its end.
top_json "$IT_DIR/quick.json" --interval 100
assert_eq "0 True $(sql "SELECT string_agg(sku || ':' || available || ':' || held, ' ' ORDER BY sku) FROM skus")" \
	"$TOP_RC $(jv "$IT_DIR/quick.json" "str(j['stock']['read']) + ' ' + ' '.join(f\"{s['sku']}:{s['available']}:{s['held']}\" for s in sorted(j['skus'], key=lambda s: s['sku']))")" \
	"top --once --interval 100: the stock topic read to its end"

# Named SKUs: those, in their order; one not on the topic said so; the other one summed.
top_json "$IT_DIR/named.json" HOT NOPE
assert_eq "HOT|NOPE|1" "$(jv "$IT_DIR/named.json" "'|'.join([s['sku'] for s in j['skus']] + j['skus_missing'] + [str(j['skus_rest']['skus'])])")" "named SKUs, missing, rest"
assert_eq "0 0" "$TOP_RC $(jv "$IT_DIR/named.json" "len(j['endpoints'])")" "no endpoint given: the stock topic only"
# The endpoints from the configuration's top.metrics when --metrics is absent.
TOP_RC=0
timeout 60 "$IT_BUILD/flashsale" -c "$IT_DIR/flashsale.conf" --set "top.metrics=$M_w1" top --once \
	--json >"$IT_DIR/conf.json" || TOP_RC=$?
assert_eq "0 $M_w1/metrics worker" "$TOP_RC $(jv "$IT_DIR/conf.json" "' '.join(e['url'] + ' ' + e['role'] for e in j['endpoints'])")" "endpoints from top.metrics"

# ---- endpoints that hang or serve bad text: reported, in bounded time --------------------
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True); time.sleep(120)' >"$IT_DIR/hang.port" &
IT_PIDS+=($!)
mkdir -p "$IT_DIR/bad"
printf 'flashsale_records_total 5\nflashsale_partition_lag_records{partition="0\\q"} 1\n' >"$IT_DIR/bad/metrics"
python3 -u -m http.server --bind 127.0.0.1 --directory "$IT_DIR/bad" 0 >"$IT_DIR/bad.log" 2>&1 &
IT_PIDS+=($!)
wait_until 10 "the hanging listener" "[ -s '$IT_DIR/hang.port' ]"
wait_until 10 "the bad endpoint" "grep -q 'port [0-9]*' '$IT_DIR/bad.log'"
bad_port=$(sed -n 's/.* port \([0-9]*\) .*/\1/p' "$IT_DIR/bad.log" | head -n 1)
top_json "$IT_DIR/hostile.json" --interval 200 --metrics "$M_w1,127.0.0.1:$(cat "$IT_DIR/hang.port"),127.0.0.1:$bad_port"
assert_eq 0 "$TOP_RC" "top's exit status with a hanging and a bad endpoint"
assert_eq True "$(jv "$IT_DIR/hostile.json" "[e['up'] for e in j['endpoints']] == [True, False, False]")" "the hanging and the bad endpoints down"
assert_eq True "$(jv "$IT_DIR/hostile.json" "'timeout' in j['endpoints'][1]['error'].lower()")" "the hanging one timed out ($(jv "$IT_DIR/hostile.json" "j['endpoints'][1]['error']"))"
assert_eq True "$(jv "$IT_DIR/hostile.json" "'bad metrics text: line 2' in j['endpoints'][2]['error']")" "the bad one's text refused ($(jv "$IT_DIR/hostile.json" "j['endpoints'][2]['error']"))"
assert_eq True "$(jv "$IT_DIR/hostile.json" "[p['worker'] for p in j['partitions']] == ['$M_w1/metrics']")" "the worker's partition still shown"
# Two scrapes of at most 2 s each (the HTTP timeout), 0.2 s apart: well under 10 s.
[ "$TOP_MS" -lt 10000 ] && say "ok: top --once with a hanging endpoint took $TOP_MS ms" ||
	fail "top --once with a hanging endpoint took $TOP_MS ms"

# ---- on a terminal: q, Ctrl-C and SIGTERM quit, the terminal restored ---------------------
# The program runs as a shell would run it: on a pseudo-terminal of its own, in a process group
# of its own in the terminal's foreground, under a parent that waits for it (so that the
# Ctrl-C byte is a SIGINT, and Ctrl-Z's SIGTSTP can stop it: the kernel drops that signal in a
# group without such a parent). The script checks that the terminal was in raw mode while it
# ran, that it exited 0 within 5 s of the key or signal with the screen left and the cursor
# shown, and that the terminal's settings are back to what they were; and that a Ctrl-Z gives
# the terminal back until SIGCONT.
cat >"$IT_DIR/pty.py" <<'EOF'
import atexit, fcntl, os, select, signal, struct, sys, termios, time
how, argv = sys.argv[1], sys.argv[2:]
master, slave = os.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))
before = termios.tcgetattr(slave)
rd, wr = os.pipe()
shell = os.fork()
if shell == 0:  # the shell: a session on the terminal, the program its foreground job
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    job = os.fork()
    if job == 0:
        os.setpgid(0, 0)
        os.tcsetpgrp(slave, os.getpid())
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        for fd in (0, 1, 2):
            os.dup2(slave, fd)
        os.execv(argv[0], argv)
    os.write(wr, b"%d" % job)
    null = os.open(os.devnull, os.O_RDWR)  # not the caller's pipe: it ends with the script
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _, status = os.waitpid(job, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
os.close(wr)
job = int(os.read(rd, 32))
out = b""
def read(seconds, until=None):
    global out
    end = time.time() + seconds
    while time.time() < end and not (until and until in out):
        if select.select([master], [], [], 0.05)[0]:
            try:
                out += os.read(master, 65536)
            except OSError:
                return
def state():
    try:
        with open("/proc/%d/stat" % job) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
def exited():
    pid, status = os.waitpid(shell, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if pid else None
def is_raw():
    return not (termios.tcgetattr(slave)[3] & (termios.ICANON | termios.ECHO))
def cleanup():  # on every way out: no program left running, or stopped
    if state() not in ("gone", "Z"):
        os.kill(job, signal.SIGKILL)
    try:
        os.waitpid(shell, 0)
    except ChildProcessError:
        pass
atexit.register(cleanup)
ENTER, LEAVE = b"\x1b[?1049h", b"\x1b[?25h\x1b[?1049l"
read(20, b"ENDPOINTS")
if b"ENDPOINTS" not in out or state() in ("gone", "Z"):
    sys.exit("no screen drawn: %r" % out[-500:])
raw = is_raw()
if how == "tstp":
    # Ctrl-Z: stopped with the terminal as it was and the screen left; continued, the keys
    # and the screen taken again and drawn; then q.
    os.kill(job, signal.SIGTSTP)
    end = time.time() + 5
    while state() != "T" and time.time() < end:
        read(0.05)
    read(0.2)
    if state() != "T" or termios.tcgetattr(slave) != before or not out.endswith(LEAVE):
        sys.exit("tstp: state %s, terminal restored %s, screen left %s" % (
            state(), termios.tcgetattr(slave) == before, out.endswith(LEAVE)))
    mark = len(out)
    os.kill(job, signal.SIGCONT)
    end = time.time() + 5
    while b"ENDPOINTS" not in out[mark:] and time.time() < end:
        read(0.05)
    if ENTER not in out[mark:] or b"ENDPOINTS" not in out[mark:] or not is_raw():
        sys.exit("tstp: not drawn again after SIGCONT, or the keys not taken: %r" % out[mark:][:200])
    how = "q"
t0 = time.time()
if how == "term":
    os.kill(job, signal.SIGTERM)
else:
    os.write(master, {"q": b"q", "ctrl-c": b"\x03"}[how])
rc = None
while rc is None and time.time() - t0 < 5:
    read(0.05)
    rc = exited()
took = time.time() - t0
read(0.2)
if rc is None:
    sys.exit("still running 5 s after %s" % how)
restored = termios.tcgetattr(slave) == before
left = out.endswith(LEAVE) and ENTER in out
print("%s rc=%d raw=%s restored=%s screen_left=%s took_ms=%d" % (how, rc, raw, restored, left, took * 1000))
EOF
for how in q ctrl-c term tstp; do
	r=$(python3 "$IT_DIR/pty.py" "$how" "$IT_BUILD/flashsale" -c "$IT_DIR/flashsale.conf" top --interval 200 --metrics "$W" 2>&1) || true
	case "$r" in
	"${how/tstp/q} rc=0 raw=True restored=True screen_left=True took_ms="*) say "ok: on a terminal, $how: $r" ;;
	*) fail "on a terminal, $how: $r" ;;
	esac
done

audit_ok
stop_worker w1
stop_worker w2
stop_worker gw
it_done

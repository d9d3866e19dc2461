#!/usr/bin/env bash
# The HTTP libraries of Debian 12 the gateway could be built on, measured alike (issue 29;
# docs/DESIGN-NOTES.md "Libraries"): each floor (libmicrohttpd, libevent's evhttp, h2o)
# answers constants on 127.0.0.1, and flashsale-httpload's buyers (2 threads, 64 keep-alive
# connections) run 100,000 POST + GET buyers, then 100,000 POST-only, three rounds. Prints
# buyers/s, p99 and the server's CPU seconds per library and round.
#
#   bench/http_libraries.sh [BUILD]        BUILD defaults to build/
set -euo pipefail
build=${1:-$(cd "$(dirname "$0")/.." && pwd)/build}
load=$build/bench/flashsale-httpload
port=$((58200 + RANDOM % 500))
for round in 1 2 3; do
	for lib in libmicrohttpd evhttp h2o; do
		case $lib in
		libmicrohttpd) bin=$build/bench/flashsale-http-floor ;;
		*) bin=$build/bench/flashsale-http-floor-$lib ;;
		esac
		[ -x "$bin" ] || { echo "$lib: $bin not built" >&2; continue; }
		port=$((port + 1))
		"$bin" --port "$port" >/dev/null 2>&1 &
		pid=$!
		for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
		a=$("$load" --url "http://127.0.0.1:$port" --sku SKU1 --buyers 100000 --concurrency 64 --threads 2 | tail -n 1)
		b=$("$load" --url "http://127.0.0.1:$port" --sku SKU1 --buyers 100000 --concurrency 64 --threads 2 --mode buy --seed 7 | tail -n 1)
		cpu=$(awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$pid/stat")
		kill "$pid"
		wait "$pid" 2>/dev/null || true
		f() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
		printf 'round %d %-14s POST+GET %6s buyers/s p99 %4s ms | POST only %6s buyers/s | server CPU %s s\n' \
			"$round" "$lib" "$(f "$a" per_s)" "$(f "$a" p99_ms)" "$(f "$b" per_s)" "$cpu"
	done
done

# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are used by the scripts that source this file
# Shared helpers for scripts/setup and scripts/services. Source it; do not run it.
#
# Everything the scripts create lives under $FLASHSALE_HOME/.local (git-ignored):
#   .local/cache/kafka-<version>/libs   broker jars, brought by scripts/setup
#   .local/pg/data                      private PostgreSQL cluster
#   .local/kafka/                       generated server.properties, cluster.id, data/
#   .local/kafka-secure/                the secured broker (services secure-up): its CA, secrets/,
#                                       clients/, server.properties, data/ (scripts/lib/secure-kafka.sh)
#   .local/cache/prometheus/            Debian's prometheus package, unpacked by scripts/setup
#   .local/prometheus/                  prometheus.yml, flashsale-rules.yml, targets/, data/
#   .local/log/                         postgres.log, kafka.log, prometheus.log
#   .local/run/                         kafka.pid, prometheus.pid, postgres socket folder, lock file
#   .local/env                          sourceable FLASHSALE_KAFKA / FLASHSALE_PG
#
# Environment knobs (all optional):
#   FLASHSALE_PG_PORT                (55432)  private PostgreSQL port on 127.0.0.1
#   FLASHSALE_KAFKA_PORT             (59092)  broker listener on 127.0.0.1
#   FLASHSALE_KAFKA_CONTROLLER_PORT  (59093)  KRaft controller listener on 127.0.0.1
#   FLASHSALE_INTENTS_PARTITIONS     (4)      partitions of the intents topic when created
#   FLASHSALE_PROM_PORT              (59090)  Prometheus (scripts/services prometheus-up) on 127.0.0.1
#   FLASHSALE_SECURE_KAFKA_PORT      (59192)  the secured broker's SASL_SSL listener (services secure-up)
#   FLASHSALE_SECURE_KAFKA_CONTROLLER_PORT (59193)  its controller listener (TLS, client certificates)
#   FLASHSALE_PROM_RULES_FOR         ()       cut the alerts' `for:` to this for tests (e.g. 1s)
#   FLASHSALE_KAFKA / FLASHSALE_PG            use these services instead of starting our own

# The repository root, from this file's own path (scripts/lib/common.sh), whatever the caller's
# working directory is.
FLASHSALE_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
export FLASHSALE_HOME

FS_LOCAL="$FLASHSALE_HOME/.local"
FS_LOG_DIR="$FS_LOCAL/log"
FS_RUN_DIR="$FS_LOCAL/run"
# The local broker's log directory (scripts/services; scripts/lib/run.sh watches it).
FS_KAFKA_DATA="$FS_LOCAL/kafka/data"

# Keep in step with scripts/kafka/pom.xml (see there why 3.9 and not 4.x).
FS_KAFKA_VERSION=3.9.1
FS_KAFKA_CACHE="$FS_LOCAL/cache/kafka-$FS_KAFKA_VERSION"
FS_KAFKA_LIBS="$FS_KAFKA_CACHE/libs"
# Written after a complete copy; holds the pom's checksum so a changed pom re-copies.
FS_KAFKA_MARKER="$FS_KAFKA_CACHE/complete"
FS_KAFKA_POM="$FLASHSALE_HOME/scripts/kafka/pom.xml"
# Debian 12's prometheus package, unpacked here by scripts/setup (never installed: its
# maintainer scripts would start a system-wide server on :9090); scripts/services starts it.
FS_PROM_CACHE="$FS_LOCAL/cache/prometheus"
FS_PROMETHEUS="$FS_PROM_CACHE/usr/bin/prometheus"
FS_PROMTOOL="$FS_PROM_CACHE/usr/bin/promtool"

# Program name for messages: "setup", "services".
FS_PROG="${FS_PROG:-$(basename "$0")}"

# One line per step on stdout.
fs_say() {
    printf '%s: %s\n' "$FS_PROG" "$*"
}

# Warnings and errors go to stderr.
fs_warn() {
    printf '%s: warning: %s\n' "$FS_PROG" "$*" >&2
}

# One-line error, then exit non-zero.
fs_die() {
    printf '%s: error: %s\n' "$FS_PROG" "$*" >&2
    exit 1
}

fs_is_root() {
    [ "$(id -u)" -eq 0 ]
}

fs_have() {
    command -v "$1" >/dev/null 2>&1
}

# Milliseconds since the epoch (GNU date).
fs_now_ms() {
    date +%s%3N
}

# fs_require_port NAME VALUE: VALUE must be a TCP port number.
fs_require_port() {
    case "$2" in
        '' | *[!0-9]*) fs_die "$1 must be a port number, got '$2'" ;;
    esac
    if [ "$2" -lt 1 ] || [ "$2" -gt 65535 ]; then
        fs_die "$1 must be a port number in 1..65535, got '$2'"
    fi
}

# fs_pkg_missing PKG...: print the packages (one a line) that dpkg does not have installed.
fs_pkg_missing() {
    local pkg status
    for pkg in "$@"; do
        status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
        if [ "$status" != installed ]; then
            printf '%s\n' "$pkg"
        fi
    done
}

# True when the Kafka jars were copied completely from the current pom.
fs_kafka_libs_ready() {
    [ -f "$FS_KAFKA_MARKER" ] && [ -f "$FS_KAFKA_POM" ] &&
        [ "$(cat "$FS_KAFKA_MARKER")" = "$(sha256sum <"$FS_KAFKA_POM" | cut -d' ' -f1)" ]
}

# The PostgreSQL server binaries (initdb, pg_ctl, postgres): pg_config --bindir, else the
# newest /usr/lib/postgresql/*/bin that has initdb.
fs_pg_bindir() {
    local dir
    if fs_have pg_config; then
        dir="$(pg_config --bindir 2>/dev/null || true)"
        if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then
            printf '%s\n' "$dir"
            return 0
        fi
    fi
    dir="$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V -r | head -n 1)"
    if [ -x "$dir" ]; then
        printf '%s\n' "${dir%/initdb}"
        return 0
    fi
    return 1
}

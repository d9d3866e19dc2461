# shellcheck shell=bash
# The secured broker of scripts/services (secure-up, secure-down, secure-status): a second
# single-node Kafka 3.9 (KRaft) next to the plain one, with its own ports and data, that takes
# SASL/SCRAM-SHA-512 over TLS only and allows what its ACLs allow (issue 48, item 4;
# docs/reference/operations.md, "A secured broker"). Sourced by scripts/services after its own
# helpers (kafka_tool, kafka_new_cluster_id, pid_alive, tcp_open, show_log_tail); touches
# nothing of the plain broker.
#
# .local/kafka-secure/
#   ca.pem                    the throw-away CA's certificate (clients trust it)
#   secrets/ (0700)           ca.key, broker.key, broker.p12 and its password, and one
#                             NAME.password per SCRAM user (admin, worker, web), all 0600
#   clients/ (0700)           per user: NAME.conf (flashsale's kafka.* keys), NAME.kcat
#                             (librdkafka properties, kcat -F), NAME.properties (Java clients,
#                             Kafka's tools' --command-config), all 0600
#   server.properties (0600)  written on every start: config/kafka/server.properties, then
#                             config/kafka/secure.properties over it
#   data/                     the log directory (formatted once, with the SCRAM users)
#   env                       FLASHSALE_SECURE_KAFKA (host:port), FLASHSALE_SECURE_KAFKA_DIR

SK_PORT="${FLASHSALE_SECURE_KAFKA_PORT:-59192}"
SK_CONTROLLER_PORT="${FLASHSALE_SECURE_KAFKA_CONTROLLER_PORT:-59193}"
SK_DIR="$FS_LOCAL/kafka-secure"
SK_SECRETS="$SK_DIR/secrets"
SK_CLIENTS="$SK_DIR/clients"
SK_DATA="$SK_DIR/data"
SK_CA="$SK_DIR/ca.pem"
SK_PROPS="$SK_DIR/server.properties"
SK_TOOLS_LOG4J="$SK_DIR/tools-log4j.properties"
SK_PID_FILE="$FS_RUN_DIR/kafka-secure.pid"
SK_LOG="$FS_LOG_DIR/kafka-secure.log"
SK_ADDR="127.0.0.1:$SK_PORT"
SK_TEMPLATE="$FLASHSALE_HOME/config/kafka/secure.properties"
SK_ADMIN_JAVA="$FLASHSALE_HOME/scripts/lib/SecureAdmin.java"
SK_USERS=(admin worker web)
SK_CERT_DAYS=30

sk_ports() {
    fs_require_port FLASHSALE_SECURE_KAFKA_PORT "$SK_PORT"
    fs_require_port FLASHSALE_SECURE_KAFKA_CONTROLLER_PORT "$SK_CONTROLLER_PORT"
    [ "$SK_PORT" != "$KAFKA_PORT" ] && [ "$SK_PORT" != "$KAFKA_CONTROLLER_PORT" ] &&
        [ "$SK_CONTROLLER_PORT" != "$KAFKA_PORT" ] && [ "$SK_CONTROLLER_PORT" != "$KAFKA_CONTROLLER_PORT" ] ||
        fs_die "secure kafka: its ports ($SK_PORT, $SK_CONTROLLER_PORT) must differ from the plain broker's ($KAFKA_PORT, $KAFKA_CONTROLLER_PORT)"
}

# A random secret of letters and digits (no quoting trouble in JAAS or properties files).
sk_random() {
    head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32
}

# The throw-away CA and the broker's certificate (127.0.0.1 and localhost; usable as a server
# and as the controller connection's client), once per .local; the keystore as PKCS12.
sk_certs() {
    local log="$FS_LOG_DIR/kafka-secure-tls.log" s="$SK_SECRETS"
    [ ! -s "$s/broker.p12" ] || return 0
    require_tool openssl
    mkdir -p "$SK_DIR" "$FS_LOG_DIR"
    (umask 077 && mkdir -p "$s")
    fs_say "secure kafka: a throw-away CA and the broker's certificate in $s"
    (umask 077 && sk_random >"$s/keystore.password")
    if ! (
        umask 077
        set -e
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout "$s/ca.key" -out "$SK_CA" -days "$SK_CERT_DAYS" \
            -subj "/CN=flashsale throw-away CA $(date -u +%Y%m%dT%H%M%SZ)" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout "$s/broker.key" -out "$s/broker.csr" -subj "/CN=flashsale-broker"
        openssl x509 -req -in "$s/broker.csr" -CA "$SK_CA" -CAkey "$s/ca.key" -set_serial "0x$(openssl rand -hex 8)" \
            -out "$s/broker.pem" -days "$SK_CERT_DAYS" -extfile <(printf '%s\n' \
            'subjectAltName=IP:127.0.0.1,DNS:localhost' 'extendedKeyUsage=serverAuth,clientAuth' \
            'keyUsage=critical,digitalSignature,keyEncipherment')
        openssl pkcs12 -export -in "$s/broker.pem" -inkey "$s/broker.key" -name broker \
            -out "$s/broker.p12" -passout "file:$s/keystore.password"
    ) >"$log" 2>&1; then
        show_log_tail "$log"
        rm -f "$s/broker.p12"
        fs_die "secure kafka: making the certificates failed (log: $log)"
    fi
    chmod 644 "$SK_CA"
}

# One password file per SCRAM user, once (they are written into the storage at format time).
sk_passwords() {
    local u
    (umask 077 && mkdir -p "$SK_SECRETS")
    for u in "${SK_USERS[@]}"; do
        [ -s "$SK_SECRETS/$u.password" ] || (umask 077 && sk_random >"$SK_SECRETS/$u.password")
        chmod 600 "$SK_SECRETS/$u.password"
    done
}

# Each user's client files: flashsale's configuration lines, kcat's and Java's properties.
sk_client_files() {
    local u pw
    (umask 077 && mkdir -p "$SK_CLIENTS")
    for u in "${SK_USERS[@]}"; do
        pw="$(cat "$SK_SECRETS/$u.password")"
        (
            umask 077
            printf '%s\n' "# scripts/services secure-up: the $u principal's settings for flashsale" \
                "brokers = $SK_ADDR" "kafka.security.protocol = SASL_SSL" \
                "kafka.sasl.mechanisms = SCRAM-SHA-512" "kafka.sasl.username = $u" \
                "kafka.sasl.password.file = $SK_SECRETS/$u.password" \
                "kafka.ssl.ca.location = $SK_CA" >"$SK_CLIENTS/$u.conf"
            printf '%s\n' "bootstrap.servers=$SK_ADDR" security.protocol=SASL_SSL \
                sasl.mechanisms=SCRAM-SHA-512 "sasl.username=$u" "sasl.password=$pw" \
                "ssl.ca.location=$SK_CA" >"$SK_CLIENTS/$u.kcat"
            printf '%s\n' security.protocol=SASL_SSL sasl.mechanism=SCRAM-SHA-512 \
                "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$u\" password=\"$pw\";" \
                ssl.truststore.type=PEM "ssl.truststore.location=$SK_CA" >"$SK_CLIENTS/$u.properties"
        )
    done
}

sk_props_text() {
    local text over
    text="$(cat "$KAFKA_TEMPLATE")" || fs_die "secure kafka: cannot read $KAFKA_TEMPLATE"
    over="$(cat "$SK_TEMPLATE")" || fs_die "secure kafka: cannot read $SK_TEMPLATE"
    text="$text"$'\n\n# ---- config/kafka/secure.properties ----\n'"$over"
    text="${text//@KAFKA_PORT@/$SK_PORT}"
    text="${text//@CONTROLLER_PORT@/$SK_CONTROLLER_PORT}"
    text="${text//@DATA_DIR@/$SK_DATA}"
    text="${text//@SECRETS@/$SK_SECRETS}"
    text="${text//@CA@/$SK_CA}"
    text="${text//@ADMIN_PASSWORD@/$(cat "$SK_SECRETS/admin.password")}"
    text="${text//@KEYSTORE_PASSWORD@/$(cat "$SK_SECRETS/keystore.password")}"
    if grep -v '^[[:space:]]*#' <<<"$text" | grep -qE '@[A-Z_]+@'; then
        fs_die "secure kafka: a placeholder scripts/services does not fill: $(grep -v '^[[:space:]]*#' <<<"$text" | grep -oE '@[A-Z_]+@' | head -n 1)"
    fi
    printf '# Generated by scripts/services secure-up from config/kafka/server.properties and secure.properties.\n%s\n' "$text"
}

sk_write_props() {
    (umask 077 && sk_props_text >"$SK_PROPS.tmp") || exit 1
    mv "$SK_PROPS.tmp" "$SK_PROPS"
    printf '%s\n' '# Generated by scripts/services secure-up: tools log warnings only.' \
        'log4j.rootLogger=WARN, stderr' 'log4j.appender.stderr=org.apache.log4j.ConsoleAppender' \
        'log4j.appender.stderr.Target=System.err' 'log4j.appender.stderr.layout=org.apache.log4j.PatternLayout' \
        'log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n' >"$SK_TOOLS_LOG4J"
}

# SecureAdmin.java in a small JVM (source-file mode: no build step).
sk_admin_tool() {
    java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
        -Dlog4j.configuration="file:$SK_TOOLS_LOG4J" -cp "$FS_KAFKA_LIBS/*" "$SK_ADMIN_JAVA" "$@" </dev/null 9>&-
}

# Formatted once, with the three SCRAM users (their passwords read from the files, inside the
# JVM: no command line carries them).
sk_format() {
    local id log="$FS_LOG_DIR/kafka-secure-format.log"
    [ ! -f "$SK_DATA/meta.properties" ] || return 0
    [ -s "$SK_DIR/cluster.id" ] || kafka_new_cluster_id >"$SK_DIR/cluster.id"
    id="$(cat "$SK_DIR/cluster.id")"
    fs_say "secure kafka: formatting $SK_DATA (cluster id $id, SCRAM users ${SK_USERS[*]})"
    if ! sk_admin_tool format "$SK_PROPS" "$id" "$SK_SECRETS" >"$log" 2>&1; then
        show_log_tail "$log"
        fs_die "secure kafka: storage format failed (log: $log)"
    fi
}

sk_pid() {
    local pid
    [ -f "$SK_PID_FILE" ] || return 1
    pid="$(cat "$SK_PID_FILE")"
    case "$pid" in '' | *[!0-9]*) return 1 ;; esac
    pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "kafka.Kafka $SK_PROPS" || return 1
    printf '%s\n' "$pid"
}

# Metadata as admin over SASL_SSL (the password from the 0600 kcat file, not the command line).
sk_answers() {
    tcp_open "$SK_ADDR" || return 1
    timeout 10 kcat -F "$SK_CLIENTS/admin.kcat" -m 2 -L -t __flashsale_probe >/dev/null 2>&1
}

sk_launch() {
    kafka_require_libs
    require_tool kcat
    sk_pid >/dev/null && return 0
    tcp_open "$SK_ADDR" && fs_die "secure kafka: $SK_ADDR is in use by another process; set FLASHSALE_SECURE_KAFKA_PORT"
    tcp_open "127.0.0.1:$SK_CONTROLLER_PORT" &&
        fs_die "secure kafka: 127.0.0.1:$SK_CONTROLLER_PORT is in use; set FLASHSALE_SECURE_KAFKA_CONTROLLER_PORT"
    mkdir -p "$SK_DIR" "$SK_DATA" "$FS_LOG_DIR" "$FS_RUN_DIR"
    sk_certs
    sk_passwords
    sk_client_files
    sk_write_props
    sk_format
    printf '\n===== %s scripts/services: starting kafka =====\n' "$(date -Is)" >>"$SK_LOG"
    fs_say "secure kafka: starting on $SK_ADDR (SASL_SSL; controller 127.0.0.1:$SK_CONTROLLER_PORT, TLS with client certificates)"
    # As the plain broker (kafka_launch), with a smaller heap: it carries tests, not benchmarks.
    (
        exec setsid java -Xms256m -Xmx256m -server -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError \
            -Djava.awt.headless=true -Dlog4j.configuration="file:$KAFKA_LOG4J" \
            -Dkafka.logs.dir="$FS_LOG_DIR/kafka-secure" -cp "$FS_KAFKA_LIBS/*" kafka.Kafka "$SK_PROPS"
    ) </dev/null >>"$SK_LOG" 2>&1 9>&- &
    printf '%s\n' "$!" >"$SK_PID_FILE"
}

sk_wait() {
    local start deadline
    start="$(fs_now_ms)"
    deadline=$((start + KAFKA_START_TIMEOUT_MS))
    while ! sk_answers; do
        if ! sk_pid >/dev/null; then
            KAFKA_LOG="$SK_LOG" kafka_show_failure
            fs_die "secure kafka: the broker exited during start-up (log: $SK_LOG)"
        fi
        [ "$(fs_now_ms)" -lt "$deadline" ] ||
            fs_die "secure kafka: no answer on $SK_ADDR after $((KAFKA_START_TIMEOUT_MS / 1000)) s (log: $SK_LOG)"
        sleep "$KAFKA_POLL_S"
    done
    fs_say "secure kafka: up on $SK_ADDR (waited $(($(fs_now_ms) - start)) ms)"
}

sk_write_env() {
    (
        umask 077
        printf '# Written by scripts/services secure-up: source it (. .local/kafka-secure/env).\n'
        printf 'export FLASHSALE_SECURE_KAFKA=%s\n' "$(shell_quote "$SK_ADDR")"
        printf 'export FLASHSALE_SECURE_KAFKA_DIR=%s\n' "$(shell_quote "$SK_DIR")"
    ) >"$SK_DIR/env.tmp"
    mv "$SK_DIR/env.tmp" "$SK_DIR/env"
}

# secure-up [TOPIC_PREFIX]: start what is down, then the topics PREFIX{intents,results,stock}
# and their ACLs (idempotent).
cmd_secure_up() {
    local prefix="${1:-}" log="$FS_LOG_DIR/kafka-secure-admin.log"
    case "$prefix" in *[!A-Za-z0-9._-]*) fs_die "secure-up: a topic prefix is letters, digits, '.', '_' and '-'" ;; esac
    sk_ports
    take_lock
    sk_launch
    sk_wait
    if ! sk_admin_tool grant "$SK_ADDR" "$SK_CLIENTS/admin.properties" "$prefix" "$INTENTS_PARTITIONS" >"$log" 2>&1; then
        show_log_tail "$log"
        fs_die "secure kafka: creating the topics ${prefix}{intents,results,stock} or their ACLs failed (log: $log)"
    fi
    sed "s/^/$FS_PROG: secure kafka: /" "$log"
    sk_write_env
    fs_say "secure kafka: up on $SK_ADDR; clients' settings in $SK_CLIENTS (. $SK_DIR/env)"
}

cmd_secure_down() {
    take_lock
    if ! sk_pid >/dev/null; then
        rm -f "$SK_PID_FILE"
        fs_say "secure kafka: already down"
        return 0
    fi
    sk_stop
}

# SIGTERM, then SIGKILL after KAFKA_STOP_TIMEOUT_MS (the caller holds the lock); nothing when
# it is down (`scripts/services down` calls it too).
sk_stop() {
    local pid deadline
    if ! pid="$(sk_pid)"; then
        rm -f "$SK_PID_FILE"
        return 0
    fi
    fs_say "secure kafka: stopping (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$(($(fs_now_ms) + KAFKA_STOP_TIMEOUT_MS))
    while pid_alive "$pid"; do
        if [ "$(fs_now_ms)" -ge "$deadline" ]; then
            fs_warn "secure kafka: still running after $((KAFKA_STOP_TIMEOUT_MS / 1000)) s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            kafka_wait_gone "$pid"
            break
        fi
        sleep 0.2
    done
    rm -f "$SK_PID_FILE"
}

cmd_secure_status() {
    local pid
    if pid="$(sk_pid)" && sk_answers; then
        echo "secure kafka: up $SK_ADDR (pid $pid; SASL_SSL, clients' settings in $SK_CLIENTS)"
    elif [ -n "${pid:-}" ]; then
        echo "secure kafka: down $SK_ADDR (pid $pid runs but does not answer)"
        return 3
    else
        echo "secure kafka: down $SK_ADDR"
        return 3
    fi
}

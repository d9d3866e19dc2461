"""The machine the benchmark ran on, read once at the start: what the report prints about it
(cores and CPU, memory, kernel, PostgreSQL's settings as the server reports them, the Kafka
broker's flush settings as it was started, client library versions, the load average).
Each value is text ("?" or "" where it could not be read, as the shell version had it).
"""

import os
import re
import subprocess


def _out(cmd, shell=False):
    """CMD's stdout without its trailing newlines ("" when it cannot run)."""
    try:
        p = subprocess.run(cmd, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           executable="/bin/bash" if shell else None)
    except OSError:
        return "", 127
    return p.stdout.decode("utf-8", "replace").rstrip("\n"), p.returncode


def _or(text_rc, default):
    """The command's output, or DEFAULT when it failed (`cmd || echo DEFAULT`)."""
    text, rc = text_rc
    return text if rc == 0 else (text + "\n" + default if text else default)


def pg_show(pg, setting):
    return _or(_out(["psql", pg, "-X", "-At", "-c", "show " + setting]), "?")


def kafka_prop(key):
    """KEY's last value in .local/kafka/server.properties (scripts/services writes the file from
    config/kafka/server.properties at every start), "" when unset."""
    found = ""
    try:
        with open(".local/kafka/server.properties") as f:
            for line in f:
                if line.startswith(key + "="):
                    found = line.rstrip("\n")[len(key) + 1:]
    except OSError:
        pass
    return found


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split(" ")[:3])


def cpu_model():
    text, _ = _out(["lscpu"])
    for line in text.split("\n"):
        m = re.match(r"Model name: *(.*)", line)
        if m:
            return m.group(1)
    return ""


def memory():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                return "%.1f GiB" % (int(line.split()[1]) / 1048576)
    return ""


def commit():
    """HEAD, marked when the tree has changes (its own outputs from an earlier run do not count
    as changes to what is measured)."""
    head = _or(_out(["git", "rev-parse", "--short", "HEAD"]), "?")
    _, rc = _out(["git", "diff", "--quiet", "HEAD", "--", ".", ":!docs/BENCHMARKS.md",
                  ":!docs/benchmarks.png", ":!docs/benchmarks.jsonl"])
    return head if rc == 0 else head + " (with uncommitted changes)"


def read(pg):
    """The header's machine sections, from PG (the bench database's connection string)."""
    kafka_jars = ("find .local/cache -name 'kafka_2.13-*.jar' 2>/dev/null | "
                  "sed -E 's/.*kafka_2\\.13-(.*)\\.jar/\\1/' | sort -V | tail -n 1")
    redis_version = "redis-server --version 2>/dev/null | sed -E 's/.* v=([^ ]+).*/\\1/' || true"
    return {
        "commit": commit(),
        "machine": {"cores": str(len(os.sched_getaffinity(0))),  # nproc
                    "cpu": cpu_model(), "memory": memory(), "kernel": os.uname().release,
                    "load_start": loadavg(), "load_end": ""},
        "postgresql": {k: pg_show(pg, k) for k in (
            "server_version", "fsync", "synchronous_commit", "wal_sync_method",
            "full_page_writes", "shared_buffers")},
        "kafka": {"version": _out(kafka_jars, shell=True)[0],
                  "log.flush.interval.ms": kafka_prop("log.flush.interval.ms"),
                  "log.flush.scheduler.interval.ms": kafka_prop("log.flush.scheduler.interval.ms"),
                  "librdkafka": _or(_out(["pkg-config", "--modversion", "rdkafka"]), "?")},
        "redis": {"version": _out(redis_version, shell=True)[0],
                  "hiredis": _or(_out(["pkg-config", "--modversion", "hiredis"]), "-")},
    }

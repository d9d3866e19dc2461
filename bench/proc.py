"""Processes for the benchmark: a run's log, the CLI and workers on a fresh run, and the bridge
to scripts/lib/run.sh (whose fresh_run makes the run's database, topics and configuration).

A Log is the file one run's commands write into (stdout and stderr, as the shell version's
`{ ... } >LOG 2>&1` did); the run reads its figures back from it (the last TIMING line, ...).
Commands that fail do not stop a run: each caller decides what a failure means, as the shell
version did with `|| rc=1`.
"""

import os
import signal
import subprocess
import time

from rows import field

# FLASHSALE_PG, FLASHSALE_PG_GATEWAY and FLASHSALE_KAFKA (from .local/env) would override a
# run's configuration file.
_RUN_ENV_DROP = ("FLASHSALE_PG", "FLASHSALE_KAFKA", "FLASHSALE_PG_GATEWAY")


def now_ms():
    """Milliseconds since the epoch (date +%s%3N)."""
    return int(time.time() * 1000)


def settle():
    """Before every measured run: write back what the runs before it left dirty in the page
    cache (sync). The kernel writes a dirty page back about 30 s after it was dirtied; hundreds
    of MB of an earlier run's Kafka log and table pages going out at once on the machine's one
    disk stall the WAL flush of every commit in flight for 100-200 ms. Without this, a run
    measured the write-back of the one before it. Every contender gets it."""
    os.sync()


def run_env():
    """The environment of the CLI and the workers on a run's configuration."""
    return {k: v for k, v in os.environ.items() if k not in _RUN_ENV_DROP}


def admin_pg():
    """The role that creates databases and owns schemas (FLASHSALE_PG_ADMIN, scripts/services);
    FLASHSALE_PG, the application's, when none is exported (an external server)."""
    return os.environ.get("FLASHSALE_PG_ADMIN") or os.environ.get("FLASHSALE_PG", "")


def base_pg(conninfo):
    """CONNINFO without its dbname (sed -E 's/dbname=[^ ]+//': the first one)."""
    i = conninfo.find("dbname=")
    if i < 0:
        return conninfo
    j = i + len("dbname=")
    k = j
    while k < len(conninfo) and conninfo[k] != " ":
        k += 1
    if k == j:  # "dbname=" with nothing after it: [^ ]+ needs one character
        return conninfo
    return conninfo[:i] + conninfo[k:]


class Log:
    """One run's log file; commands run with their output in it."""

    def __init__(self, path):
        self.path = path
        self.f = open(path, "w", encoding="utf-8", errors="replace")

    def echo(self, text):
        self.f.write(text + "\n")
        self.f.flush()

    def run(self, cmd, out="log", env=None, timeout=None):
        """Runs CMD, its stderr into the log; OUT: "log" (stdout too), "null", or "capture"
        (stdout returned, as $(...) gives it: trailing newlines removed). Returns (rc, stdout)."""
        self.f.flush()
        stdout = {"log": self.f, "null": subprocess.DEVNULL, "capture": subprocess.PIPE}[out]
        try:
            p = subprocess.run(cmd, stdout=stdout, stderr=self.f, stdin=subprocess.DEVNULL,
                               env=env, timeout=timeout)
        except OSError as e:  # not found or not executable: what the shell would say
            self.echo("%s: %s" % (cmd[0], e.strerror))
            return 127, ""
        text = ""
        if out == "capture":
            text = p.stdout.decode("utf-8", "replace").rstrip("\n")
        return p.returncode, text

    def start(self, cmd, env=None):
        """CMD in the background, stdout to /dev/null, stderr into the log (`cmd >/dev/null &`)."""
        self.f.flush()
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.f,
                                stdin=subprocess.DEVNULL, env=env)

    def lines(self, prefix="", contains=None):
        """The log's lines starting with PREFIX (or containing CONTAINS), read from the file."""
        self.f.flush()
        with open(self.path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        out = []
        for line in text.split("\n"):
            if contains is not None:
                if contains in line:
                    out.append(line)
            elif line.startswith(prefix):
                out.append(line)
        return out

    def last(self, prefix="", contains=None):
        found = self.lines(prefix, contains)
        return found[-1] if found else ""

    def close(self):
        self.f.close()


def file_lines(path, contains):
    """The lines of PATH containing CONTAINS ([] when it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [line.rstrip("\n") for line in f if contains in line]
    except OSError:
        return []


class Run:
    """A fresh flashsale run (scripts/lib/run.sh's fresh_run NAME PARTITIONS): its database
    flashsale_NAME, topics NAME.*, configuration .local/NAME/flashsale.conf."""

    def __init__(self, log, name, partitions):
        self.log = log
        self.name = name
        self.conf = ".local/%s/flashsale.conf" % name
        self.pg = "%s dbname=flashsale_%s" % (base_pg(os.environ.get("FLASHSALE_PG", "")),
                                               name.replace("-", "_"))
        # FS_PROG (the name in run.sh's warnings) comes from $0: "bench", as before.
        self.rc, _ = log.run(["bash", "-c", '. scripts/lib/run.sh && fresh_run "$1" "$2"',
                              "bench", name, str(partitions)])

    def fs_cmd(self, args):
        return ["build/flashsale", "-c", self.conf] + list(args)

    def fs(self, *args, out="log", timeout=None):
        """The CLI on this run's configuration: (rc, stdout)."""
        return self.log.run(self.fs_cmd(args), out=out, env=run_env(), timeout=timeout)

    def fs_ok(self, *args, out="null"):
        return self.fs(*args, out=out)[0] == 0

    def fs_start(self, *args):
        """The CLI in the background (`fs ARGS >/dev/null &`)."""
        return self.log.start(self.fs_cmd(args), env=run_env())

    def start_worker(self, log_path, cmd=("build/flashsale-worker",)):
        """A worker (or CMD) on this run, its output in LOG_PATH (start_run_worker)."""
        with open(log_path, "w") as out:
            return subprocess.Popen(list(cmd) + ["-c", self.conf], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=run_env())

    def summary_sums(self, skus):
        """The sums of `flashsale summary` over SKUS: (SOLD, LEFT) as text, ("", "") when a
        summary had no figure (the shell version's arithmetic failed there)."""
        sold = left = 0
        for sku in skus:
            _, line = self.fs("summary", "--sku", sku, out="capture")
            try:
                sold += int(field(line, "sold"))
                left += int(field(line, "remaining"))
            except ValueError:
                return "", ""
        return str(sold), str(left)

    def audit(self, path):
        """`flashsale audit` into PATH: "ok" or "FAILED"."""
        with open(path, "w") as out:
            rc = subprocess.run(self.fs_cmd(["audit"]), stdout=out, stderr=self.log.f,
                                stdin=subprocess.DEVNULL, env=run_env()).returncode
        return "ok" if rc == 0 else "FAILED"


def stop(*procs):
    """SIGTERM to each, then wait for each (stop_run_workers)."""
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except OSError:
            pass
    for p in procs:
        p.wait()


def alive(proc):
    return proc.poll() is None

#!/usr/bin/env python3
"""Derive each worker role's seccomp allow-list from a real run.

Usage:
    scripts/seccomp-trace.py run -- CMD ARGS...   # run CMD under `strace -f`, then report
    scripts/seccomp-trace.py report TRACE_FILE    # report from an existing `strace -f` log

A confined process names itself just before its filters go in (`prctl(PR_SET_NAME, "hz-ROLE")`:
`hz-tools`, `hz-model`, …, `hz-reaper`, and `hz-launcher` for a command launcher), so only what
it does *under* its allow-list is counted. Threads it creates later count for it; processes it
forks (the probes of forbidden operations) and commands its launcher execs are listed apart
(`fork of …`, `commands`) and are never held to an allow-list.

The report lists, per role, the syscalls seen and, with `--diff`, how they compare with
`policy/seccomp/<role>.txt`. Review every addition before it goes into a list: the lists are
what a compromised worker may do. strace itself must be installed (`./scripts/setup.sh` does).
"""

import collections
import os
import re
import subprocess
import sys
import tempfile

LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()(.*)$")
SET_NAME = re.compile(r'^PR_SET_NAME, "hz-([\w-]+)"')
EXECVE_ARGV0 = re.compile(r'^"[^"]*", \["([^"]*)"(?:, "([^"]*)")?(?:, "([^"]*)")?')
RET = re.compile(r"=\s+(-?\d+)")
# With --decode-pids=pidns, a pid from another pid namespace is followed by its host pid.
HOST_PID = re.compile(r"=\s+-?\d+ /\* (\d+) in strace's PID NS \*/")
ROLE_ARGV0 = re.compile(r"^hanzo-dev\[(\w+)\]$")
FORKS = {"clone", "clone3", "fork", "vfork"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(path):
    role_of = {}  # pid -> label, once the process (or the thread or fork it came from) is confined
    seen = collections.defaultdict(collections.Counter)
    pending_clone = {}  # pid -> whether the clone in flight creates a thread
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(raw)
            if not m:
                continue
            pid = int(m.group(1))
            name = m.group(2) or m.group(3)
            rest = m.group(4)
            started = m.group(3) is not None
            if name == "prctl" and started:
                n = SET_NAME.match(rest)
                if n:
                    role_of[pid] = n.group(1)
                    continue
            role = role_of.get(pid)
            if role is None:
                continue
            if name == "execve" and started:
                role_of[pid] = "commands"
                seen["commands"]["execve"] += 1
                continue
            if name in FORKS:
                if started:
                    pending_clone[pid] = "CLONE_THREAD" in rest
                if "<unfinished" not in rest:
                    thread = pending_clone.pop(pid, False)
                    host = HOST_PID.search(rest)
                    ret = RET.search(rest)
                    child = int(host.group(1)) if host else (int(ret.group(1)) if ret else -1)
                    if child > 0:
                        if thread or role.startswith("fork of") or role == "commands":
                            role_of[child] = role
                        else:
                            role_of[child] = f"fork of {role}"
            seen[role][name] += 1
    return seen


def load_list(role):
    path = os.path.join(ROOT, "policy", "seccomp", f"{role}.txt")
    if not os.path.exists(path):
        return None
    names = set()
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(line)
    return names


def report(path, diff):
    seen = parse(path)
    base = load_list("base") or set()
    for role in sorted(seen):
        calls = seen[role]
        print(f"== {role}: {len(calls)} distinct syscalls")
        listed = load_list(role)
        for name in sorted(calls):
            mark = ""
            if diff and role != "commands" and not role.startswith("fork of") and listed is not None:
                mark = "" if name in listed or name in base else "   <- NOT IN THE LIST"
            print(f"  {name:<24} {calls[name]:>8}{mark}")
        print()


def main():
    args = sys.argv[1:]
    diff = "--diff" in args
    args = [a for a in args if a != "--diff"]
    if not args:
        print(__doc__)
        return 2
    if args[0] == "report" and len(args) == 2:
        report(args[1], diff)
        return 0
    if args[0] == "run" and "--" in args:
        # The trace goes through a pipe to this script's `report`, never to disk: a test suite's
        # trace runs to gigabytes.
        cmd = args[args.index("--") + 1 :]
        out = tempfile.NamedTemporaryFile(prefix="hanzo-seccomp-", suffix=".txt", delete=False)
        out.close()
        me = os.path.abspath(__file__)
        sink = f"|{sys.executable} {me} report /dev/stdin {'--diff' if diff else ''} > {out.name}"
        rc = subprocess.call(
            ["strace", "-f", "-qq", "-e", "signal=none", "--decode-pids=pidns", "-s", "48", "-o", sink]
            + cmd
        )
        print(open(out.name).read())
        print(f"(report kept in {out.name}; command exit {rc})")
        return rc
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""A job's attempt to read a runner credential, in every way a job could: shared by the
real-node suites that show a credential out of a job's reach (the cache's secret, issue 24; the
registration token, issue 34).

``PROBE`` is a set of POSIX sh functions (bash and busybox), so that one text runs in a host
step, in a job container and in the containers a job asks the daemon for; ``DOCKER`` is what
a container step runs after its own view: the daemon's. Each way is bounded, so the probe
costs seconds, not the minutes that a scan of all memory and all of ``/`` cost (and that
stalled the kubelet): every command that may block or read much runs under ``timeout``, every
answer is cut to one short line, memory is read only from small writable mappings, and files
are searched only in small, named places.

The needles: each secret's key line with a value, or the value itself wherever it stands. The
test writes the first 12 characters of the value (a secret that lives as long as the test) in
place of its prefix, and the probe prints them with the 16 or more that must follow (so the
probe's own script, which holds the 12, is no hit). The test then looks for the whole value
in the whole log: that is the oracle, not the probe's verdicts.

A control reads a process of the job's own the same ways (memory, environment) and must find
its marker, so a probe that can read nothing cannot pass for a defence.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Needle:
    """One secret the probe looks for. ``key_line`` (a BRE) matches where it would be written
    with its key (a config line, an environment entry); ``charset`` is the BRE class of the
    value's characters."""

    key: str
    key_line: str
    prefix: str
    charset: str

    def value(self) -> str:
        return f"{self.prefix}{self.charset}\\{{16,\\}}"


def cache_secret(value: str) -> Needle:
    """The cache server's secret: 64 hex digits, in the config as ``external_secret:``."""
    return Needle(
        "external_secret", "external_secret: *.\\?[0-9a-f]\\{8,\\}", _prefix(value), "[0-9a-f]"
    )


def registration_token(value: str) -> Needle:
    """Gitea's registration token: 40 letters and digits, in an environment as
    ``GITEA_RUNNER_REGISTRATION_TOKEN=``, on a command line after ``--token``."""
    return Needle(
        "GITEA_RUNNER_REGISTRATION_TOKEN",
        "GITEA_RUNNER_REGISTRATION_TOKEN=[0-9A-Za-z]\\{8,\\}\\|--token.[0-9A-Za-z]\\{8,\\}",
        _prefix(value),
        "[0-9A-Za-z]",
    )


def _prefix(value: str) -> str:
    assert re.fullmatch(r"[0-9A-Za-z]{24,}", value), "a secret of letters and digits"
    return value[:12]


def probe(*needles: Needle) -> str:
    """The probe's functions, set to look for these needles."""
    assert needles
    secret = "\\|".join(part for n in needles for part in (n.key_line, n.value()))
    hit = "\\|".join(part for n in needles for part in (n.key, n.value()))
    return PROBE.replace("@SECRET@", secret).replace("@HIT@", hit)


def step(script: str) -> str:
    """A script as the body of a workflow step's ``run: |`` (indented under it)."""
    return textwrap.indent(textwrap.dedent(script).strip(), " " * 10).lstrip()


def host_workflow(name: str, label: str, probe_text: str, then: str) -> str:
    """A workflow whose first step runs the probe in a host-mode step (the runner container,
    the runner's own user), then ``then``: the steps that must still work (YAML list items at
    six spaces)."""
    return f"""\
name: {name}
on: [push]
defaults:
  run:
    shell: bash
jobs:
  probe:
    runs-on: {label}
    steps:
      - timeout-minutes: 4
        run: |
          t0=$(date +%s); echo "job uid=$(id -u)"
          {step(probe_text)}
          own; files ""; procs /proc; control
          echo "PROBE took $(( $(date +%s) - t0 )) s"
{then}"""


def container_workflow(name: str, label: str, socket: str, probe_text: str, then: str) -> str:
    """The same in a job container with the daemon's socket, then the daemon's view
    (``DOCKER``). ``socket`` empty: the runner mounts the daemon's socket itself (a daemon on
    a Unix socket, as in ``dind-userns``), and a second mount of it would be refused."""
    probe_var = "PROBE=$(cat <<'EOF'\n" + textwrap.dedent(probe_text).strip() + "\nEOF\n)"
    volumes = f"\n      volumes:\n        - {socket}:/var/run/docker.sock" if socket else ""
    return f"""\
name: {name}
on: [push]
defaults:
  run:
    shell: sh
jobs:
  probe:
    runs-on: {label}
    container:
      image: docker.io/local/busybox-docker:1.35{volumes}
    steps:
      - timeout-minutes: 6
        run: |
          t0=$(date +%s); echo "job uid=$(id -u)"
          {step(probe_var)}
          eval "$PROBE"
          own; files ""; procs /proc; control
          {step(DOCKER)}
          echo "PROBE took $(( $(date +%s) - t0 )) s"
{then}"""


PROBE = r"""
T=timeout
SECRET='@SECRET@'
HIT='@HIT@'
CFG=/etc/gitea-runner-operator/config
one() { tr '\0\n' '  ' | head -c 240; }
grab() { tr -c 'a-zA-Z0-9_:. -' '\n' | grep -o "$1.\{0,80\}" | head -n 3 | one; }

# mem DIR PATTERN: whether the process's memory opens at all (the defence: a non-dumpable
# process's does not, for its own uid too), then PATTERN in its writable mappings of at most
# 64 MiB, 256 MiB in all. A config lives in small heap spans; the large mappings (Go's arena
# reservations, dockerd's) are mostly untouched pages and cost minutes for nothing.
mem() {
  err=$($T 5 dd if="$1/mem" bs=1 count=0 2>&1 >/dev/null) ||
    { echo "not readable: $err" | one; return 0; }
  maps=$($T 5 cat "$1/maps" 2>&1) || { echo "maps not readable: $maps" | one; return 0; }
  left=65536
  found=$(echo "$maps" | while read -r range perms rest; do
    case $perms in rw*) ;; *) continue ;; esac
    s=$((0x${range%-*} / 4096)); n=$((0x${range#*-} / 4096 - s))
    [ "$n" -gt 16384 ] && continue
    [ "$n" -gt "$left" ] && break
    left=$((left - n))
    $T 10 dd if="$1/mem" bs=4096 skip="$s" count="$n" 2>/dev/null
  done | grab "$2")
  echo "readable, found: ${found:-nothing}"
}

# proc DIR WHO: each door /proc opens onto a process: its environment, its memory, its open
# descriptors (a config read through one would still be there), its root and working
# directory (the config directory and the sidecar's Secret mount seen from inside it).
proc() {
  echo "PROBE $2 process: pid ${1##*/} ($(cat "$1/comm" 2>&1))"
  echo "PROBE $2 environ: $($T 5 cat "$1/environ" 2>&1 | one)"
  echo "PROBE $2 mem: $(mem "$1" "\($HIT\)")"
  echo "PROBE $2 fd: $($T 5 ls -l "$1/fd/" 2>&1 | one)"
  echo "PROBE $2 fd read: $(n=0; for f in "$1"/fd/*; do
      n=$((n + 1)); [ $n -gt 16 ] && break
      $T 1 head -c 65536 "$f" 2>&1 </dev/null
    done | grab "\($HIT\|denied\|No such\)")"
  echo "PROBE $2 root: $($T 5 cat "$1/root$CFG"/* "$1/root/gro/secret/config.yaml" 2>&1 | one)"
  echo "PROBE $2 cwd: $($T 5 ls -la "$1/cwd/" 2>&1 | one)"
  echo "PROBE $2 cwd files: $($T 5 grep -hos "$SECRET" "$1"/cwd/* "$1"/cwd/.[!.]* 2>&1 | one)"
}

# procs PROC: the runner and the gro-config sidecar under a proc file system, found by name
# (the runner's binary; the sidecar's shell by its script's marker path, spelt here in two
# parts so that no probe's own command line matches it), not by reading every process.
procs() {
  mark=/gro/state; mark=$mark/delivered; runner=; sidecar=
  for p in "$1"/[0-9]*; do
    case $(cat "$p/comm" 2>/dev/null) in
      gitea-runner | act_runner | forgejo-runner) proc "$p" runner; runner=1 ;;
      sh) case $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) in
            *"$mark"*) proc "$p" gro-config; sidecar=1 ;;
          esac ;;
    esac
  done
  [ -n "$runner" ] || echo "PROBE runner process: not visible in $1"
  [ -n "$sidecar" ] || echo "PROBE gro-config process: not visible in $1"
  echo "PROBE environs: $(environs "$1")"
}

# environs PROC: every process's environment under a proc file system (at most 512; the
# daemon's own included, which is where a token given to the runner container ended up in
# dind-rootless), searched for the needles; says how many it read and how many it could not.
environs() {
  n=0; shut=0; hits=
  for p in "$1"/[0-9]*; do
    n=$((n + 1)); [ $n -gt 512 ] && break
    $T 2 cat "$p/environ" >/tmp/gro-environ 2>/dev/null || { shut=$((shut + 1)); continue; }
    h=$(tr '\0' '\n' </tmp/gro-environ | grep -o "\($SECRET\).\{0,64\}" | head -n 2 | one)
    [ -n "$h" ] && hits="$hits [$(cat "$p/comm" 2>/dev/null)] $h"
  done
  echo "$n processes, $shut not readable, hits:${hits:- none}"
}

# own: the job's own environment (what the runner handed the step)
own() {
  echo "PROBE own environment: $(env | grep -c .) entries, hits: $(env |
    grep -o "\($SECRET\).\{0,64\}" | one)"
}

# control: a process of the job's own, read the same way, must show its marker, so a probe
# that can read nothing cannot pass for a defence.
control() {
  # not last in its script, or busybox's sh would exec sleep and drop the marker
  GRO_CONTROL=gro-control-env-1 sh -c 'marker=gro-control-marker-1; sleep 30; :' \
    </dev/null >/dev/null 2>&1 & ctl=$!
  sleep 1
  echo "PROBE control memory: $(mem /proc/$ctl gro-control-marker)"
  echo "PROBE control environ: $(tr '\0' '\n' </proc/$ctl/environ | grep -o 'gro-control-env-1')"
  kill $ctl
}

# files ROOT: the config where a job would look for it: $CONFIG_FILE and the config directory
# (the FIFO: it blocks a reader while it exists, hence the timeout), the sidecar's Secret
# mount, the kubelet's copy of the Secret volume on the node; then the secret's line in the
# regular files (FIFOs would block) of small, named places, the daemon's storage left out.
files() {
  for f in "$1${CONFIG_FILE:-$CFG/config.yaml}" "$1$CFG"/* "$1/gro/secret/config.yaml" \
    "$1"/var/lib/kubelet/pods/*/volumes/kubernetes.io~secret/*/config.yaml; do
    echo "PROBE file $f: $($T 5 cat "$f" 2>&1 | one)"
  done
  echo "PROBE config dir: $($T 5 ls -la "$1$CFG" 2>&1 | one)"
  # the runner's registration (its own credential, for its one job): which keys it holds
  st="$1/data/.runner"
  if $T 5 cat "$st" >/tmp/gro-state 2>&1; then
    keys=$(grep -o '"[a-z_]*" *:' /tmp/gro-state | tr -d '": ' | one)
    echo "PROBE state file $st: readable, keys: $keys"
  else
    echo "PROBE state file $st: $(one </tmp/gro-state)"
  fi
  dirs=
  for d in etc data tmp run home root gro certs var/run var/lib/kubelet/pods; do
    [ -d "$1/$d" ] && dirs="$dirs $1/$d"
  done
  # shellcheck disable=SC2086
  echo "PROBE files: $($T 30 find $dirs -maxdepth 8 \
    \( -path '*/.local/share/docker' -o -path '*/var/lib/docker' -o -name proc \) -prune \
    -o -type f -size -256k -print 2>/dev/null | head -n 5000 |
    $T 30 xargs grep -hos "$SECRET" 2>/dev/null | head -n 3 | one)"
}
"""

# What a container step runs after the job's own view: the daemon's. With Docker (``dind``,
# ``dind-rootless``) a job asks the daemon for what it may not have: ``-v`` of the config
# directory; ``-v /:/host``, the daemon's root (in ``dind-rootless`` the runner container's
# own file system) with its ``/proc`` (in ``dind-rootless`` the runner's PID namespace); and
# ``--pid=host``. Each with ``--privileged`` where the daemon grants it, else without: the
# testbed's DinD refuses it ("unable to apply caps"); the rootless daemon may not mount a new
# sysfs, but grants it with its own ``/sys`` bound in. The rootless daemon refuses
# ``--pid=host`` (its user namespace may not mount a ``/proc`` for the PID namespace it
# shares), which ``-v /:/host`` makes up for: the same processes under ``/host/proc``.
DOCKER = r"""
B=docker.io/local/busybox:1.35
echo "PROBE docker bind: $($T 60 docker run --rm -v $CFG:/x $B \
  sh -c 'ls -la /x; cat /x/*' 2>&1 | one)"
# the ways a job would ask for privilege: plain, then with the daemon's own /sys (a rootless
# daemon that may not mount a new sysfs may still bind the one it has), then none
P1=--privileged; P2="--privileged -v /sys:/sys"
for extra in "$P1" "$P2" ""; do
  # shellcheck disable=SC2086
  $T 120 docker run --rm $extra -v /:/host -e PROBE="$PROBE" $B \
    sh -c 'eval "$PROBE"; files /host; procs /host/proc' >/tmp/root 2>&1 && break
  [ -n "$extra" ] && echo "PROBE docker $extra -v /:/host refused: $(one </tmp/root)"
done
sed "s|^PROBE ||; s|^|PROBE via docker ${extra:+$extra }-v /:/host: |" /tmp/root
for extra in "$P1" "$P2" ""; do
  # shellcheck disable=SC2086
  $T 120 docker run --rm $extra --pid=host -e PROBE="$PROBE" $B \
    sh -c 'eval "$PROBE"; procs /proc; control' >/tmp/pidhost 2>&1 && break
  [ -n "$extra" ] && echo "PROBE docker $extra --pid=host refused: $(one </tmp/pidhost)"
done
sed "s|^PROBE ||; s|^|PROBE via docker ${extra:+$extra }--pid=host: |" /tmp/pidhost
"""

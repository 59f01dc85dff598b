#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for the tests and for trying
# `snakemake --profile slurm` without a cluster.
#
#   scripts/slurm_local.sh start    install slurm-wlm + munge if missing (root, apt-get), write the
#                                   config under the state dir, start munged, slurmctld, slurmd,
#                                   wait until the node is idle. Does nothing if already up.
#   scripts/slurm_local.sh stop     stop the daemons this script started (by their pid files),
#                                   leave the state dir for inspection. Does nothing if down.
#   scripts/slurm_local.sh status   exit 0 and print sinfo if the cluster answers, exit 3 if not.
#   scripts/slurm_local.sh env      print `export SLURM_CONF=...` (eval it in your shell).
#
# Environment:
#   SLURM_LOCAL_DIR        state dir (config, logs, spool, pid files)   [/tmp/selfknow-slurm]
#                          (one local cluster at a time: it owns /etc/slurm/slurm.conf)
#   SLURM_LOCAL_CTLD_PORT  slurmctld port                               [6817]
#   SLURM_LOCAL_SLURMD_PORT slurmd port                                 [6818]
#   SLURM_LOCAL_NO_INSTALL=1  never call apt-get; fail if SLURM is missing
#
# Design (measured on Debian 12's SLURM 22.05, 2 cores, no systemd):
# - no cgroups: proctrack/linuxproc and task/none work inside containers;
# - the node is declared with what `slurmd -C` reports (real CPU count and memory), and
#   memory is a consumable resource, so a job's --mem is honoured and jobs queue when full;
# - no slurmdbd: `sacct` cannot answer, so the Snakemake profile polls with `squeue`, and
#   MinJobAge keeps finished jobs visible to squeue for 10 minutes (longer than the executor
#   plugin's longest polling interval, 180 s); the final state of every job is also appended
#   to $STATE/log/jobcomp.log (jobcomp/filetxt), which keeps it after MinJobAge;
# - munged runs on its own socket and key under the state dir, so a system munge (if any) is
#   left alone;
# - /etc/slurm/slurm.conf is linked to the config in the state dir while the cluster runs (and
#   the link removed on stop): srun inside a Snakemake job ignores SLURM_CONF (see
#   link_system_conf), and plain `sbatch`/`squeue` then work in any shell. The script refuses
#   to start if that file belongs to something else.
set -euo pipefail

STATE=${SLURM_LOCAL_DIR:-/tmp/selfknow-slurm}
CTLD_PORT=${SLURM_LOCAL_CTLD_PORT:-6817}
SLURMD_PORT=${SLURM_LOCAL_SLURMD_PORT:-6818}
CONF=$STATE/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.socket.2
SYSTEM_CONF=/etc/slurm/slurm.conf
# Finished jobs stay in slurmctld's memory (and so in squeue) this long.
MIN_JOB_AGE=600
START_TIMEOUT=${SLURM_LOCAL_START_TIMEOUT:-60}
# Debian installs the daemons (slurmctld, slurmd, munged) in /usr/sbin, which a root shell's PATH
# can lack (`su` without `-`, a CI runner's minimal environment).
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac

log() { echo "slurm_local: $*" >&2; }
die() { log "error: $*"; exit 1; }

have_slurm() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sbatch >/dev/null && command -v munged >/dev/null
}

install_slurm() {
    have_slurm && return 0
    [ "${SLURM_LOCAL_NO_INSTALL:-0}" = 1 ] && die "SLURM is not installed and SLURM_LOCAL_NO_INSTALL=1"
    [ "$(id -u)" = 0 ] || die "SLURM is not installed; run as root (apt-get install slurm-wlm munge)"
    command -v apt-get >/dev/null || die "SLURM is not installed and apt-get is not available"
    log "installing slurm-wlm and munge with apt-get"
    local t0=$SECONDS
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q >"$STATE/apt.log" 2>&1 \
        || { tail -20 "$STATE/apt.log" >&2; die "apt-get update failed (log: $STATE/apt.log)"; }
    # The packages' own services must not start: this script runs its own daemons with its
    # own config. Containers have a policy-rc.d that forbids it; elsewhere add one meanwhile.
    # (DPkg::Lock::Timeout: wait for another apt-get on the machine instead of failing.)
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e $policy ]; then
        printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy && own_policy=1
    fi
    local rc=0
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
        slurm-wlm munge >>"$STATE/apt.log" 2>&1 || rc=$?
    [ $own_policy = 1 ] && rm -f $policy
    [ $rc = 0 ] || { tail -20 "$STATE/apt.log" >&2; die "apt-get install failed (log: $STATE/apt.log)"; }
    log "installed in $((SECONDS - t0)) s"
    have_slurm || die "slurm-wlm installed but its binaries are not on PATH"
}

# True while the process exists and is not a zombie (where pid 1 does not reap, an ended
# daemon lingers as one, and kill -0 would still succeed).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# pid from a pid file, if that process is alive.
live_pid() {
    local f=$1 pid
    [ -s "$f" ] || return 1
    pid=$(cat "$f")
    [ -n "$pid" ] && alive "$pid" && echo "$pid"
}

node_name() { hostname -s; }

write_config() {
    mkdir -p "$STATE"/{munge,spool/ctld,spool/d,log}
    chmod 700 "$STATE" "$STATE/munge"
    # The node as slurmd itself sees it: a mismatch would drain the node.
    local hw
    hw=$(slurmd -C | head -1) || die "slurmd -C failed"
    hw=${hw#NodeName=* }
    local node
    node=$(node_name)
    local tmp=$CONF.tmp
    cat >"$tmp" <<EOF
# Written by scripts/slurm_local.sh: a single-node cluster on $(node_name). Do not edit;
# change the script instead.
ClusterName=selfknow
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: works in containers and on machines without systemd.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Every finished job gets a line here (no slurmdbd, and scontrol forgets jobs after MinJobAge).
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.log
MpiDefault=none
MailProg=/bin/true
# CPUs and memory are both consumable, so --mem and --cpus-per-task are enforced by scheduling.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=$MIN_JOB_AGE
KillWait=5
InactiveLimit=0
Waittime=0
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node $hw State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    mv "$tmp" "$CONF"
    if [ ! -s "$STATE/munge/munge.key" ]; then
        mungekey --create --keyfile="$STATE/munge/munge.key" --force >/dev/null 2>&1 \
            || dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1 count=1024 status=none
        chmod 600 "$STATE/munge/munge.key"
    fi
}

link_system_conf() {
    # srun inside a job must reach this cluster without SLURM_CONF: the Snakemake jobstep
    # plugin (0.6) removes SLURM_* variables, SLURM_CONF included, before it calls srun. So
    # /etc/slurm/slurm.conf, srun's built-in default, has to be ours while we run.
    if [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then return 0; fi
    if [ -L "$SYSTEM_CONF" ] && grep -qs "^# Written by scripts/slurm_local.sh" "$SYSTEM_CONF"; then
        local other
        other=$(dirname "$(readlink "$SYSTEM_CONF")")
        if live_pid "$other/slurmctld.pid" >/dev/null; then
            die "another local cluster is running from $other; use it, or stop it first: SLURM_LOCAL_DIR=$other $0 stop"
        fi
        rm -f "$SYSTEM_CONF"
    elif [ -e "$SYSTEM_CONF" ] || [ -L "$SYSTEM_CONF" ]; then
        die "$SYSTEM_CONF exists and was not written by this script (a real cluster?); not replacing it"
    fi
    mkdir -p "$(dirname "$SYSTEM_CONF")"
    ln -s "$CONF" "$SYSTEM_CONF"
}

unlink_system_conf() {
    if [ -L "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" = "$CONF" ]; then
        rm -f "$SYSTEM_CONF"
    fi
}

cluster_answers() {
    SLURM_CONF=$CONF timeout 10 scontrol ping 2>/dev/null | grep -q "is UP"
}

node_state() {
    SLURM_CONF=$CONF timeout 10 sinfo -h -N -n "$(node_name)" -o %T 2>/dev/null | head -1
}

start_daemons() {
    if ! live_pid "$STATE/munged.pid" >/dev/null; then
        rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
        munged --force --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
            --pid-file="$STATE/munged.pid" --log-file="$STATE/log/munged.log" \
            --seed-file="$STATE/munge/munged.seed" \
            || { tail -5 "$STATE/log/munged.log" >&2 || true; die "munged failed to start"; }
    fi
    if ! live_pid "$STATE/slurmctld.pid" >/dev/null; then
        # -c: forget the jobs of an earlier run (stop cancelled them, or they died with it).
        slurmctld -f "$CONF" -c \
            || { tail -20 "$STATE/log/slurmctld.log" >&2 || true; die "slurmctld failed to start"; }
    fi
    if ! live_pid "$STATE/slurmd.pid" >/dev/null; then
        slurmd -f "$CONF" \
            || { tail -20 "$STATE/log/slurmd.log" >&2 || true; die "slurmd failed to start"; }
    fi
}

wait_idle() {
    local deadline=$((SECONDS + START_TIMEOUT)) state=""
    while [ $SECONDS -lt $deadline ]; do
        state=$(node_state || true)
        case $state in
            idle | mixed | allocated) return 0 ;;
            drain* | down*)
                # A node left down by an earlier run: bring it back.
                SLURM_CONF=$CONF scontrol update nodename="$(node_name)" state=resume \
                    >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    log "node state after ${START_TIMEOUT}s: '${state}'"
    tail -20 "$STATE/log/slurmctld.log" >&2 || true
    tail -20 "$STATE/log/slurmd.log" >&2 || true
    die "the node did not become idle"
}

cmd_start() {
    mkdir -p "$STATE"
    local t0=$SECONDS
    install_slurm
    if live_pid "$STATE/slurmctld.pid" >/dev/null && live_pid "$STATE/slurmd.pid" >/dev/null \
        && live_pid "$STATE/munged.pid" >/dev/null && cluster_answers; then
        link_system_conf
        wait_idle
        log "already running (SLURM_CONF=$CONF)"
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "starting the daemons needs root (slurmd launches jobs as their user)"
    # Something is half up (or a stale pid file): start clean.
    cmd_stop quiet
    write_config
    link_system_conf
    start_daemons
    wait_idle
    log "up in $((SECONDS - t0)) s: node $(node_name), $(SLURM_CONF=$CONF sinfo -h -N -o '%c CPUs, %m MB' | head -1)"
    log "use it with: export SLURM_CONF=$CONF"
}

stop_pidfile() {
    local name=$1 f=$2 pid i
    pid=$(live_pid "$f") || { rm -f "$f"; return 0; }
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        log "$name ($pid) did not stop in 10 s; killing it"
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

cmd_stop() {
    local quiet=${1:-}
    [ -d "$STATE" ] || return 0
    # Cancel jobs first so their steps end with the daemons rather than linger.
    local i
    if live_pid "$STATE/slurmctld.pid" >/dev/null && cluster_answers; then
        SLURM_CONF=$CONF timeout 10 scancel --quiet --full --user="$(id -un)" >/dev/null 2>&1 || true
        for i in $(seq 1 40); do
            [ -z "$(SLURM_CONF=$CONF timeout 10 squeue -h -t RUNNING,PENDING,COMPLETING -o %i 2>/dev/null)" ] && break
            sleep 0.25
        done
    fi
    stop_pidfile slurmd "$STATE/slurmd.pid"
    stop_pidfile slurmctld "$STATE/slurmctld.pid"
    # A slurmstepd that outlived the cancel (slurmctld not answering) is ours if it holds
    # our slurmd log open; slurmd does not pass its environment on, so that is the mark.
    # slurmstepd ignores SIGTERM: end the job's process groups, then the step daemon.
    local p c pg
    for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
        if find "/proc/$p/fd" -maxdepth 1 -lname "$STATE/*" 2>/dev/null | grep -q .; then
            for c in $(pgrep -P "$p" 2>/dev/null || true); do
                pg=$(ps -o pgid= -p "$c" | tr -d ' ')
                [ -n "$pg" ] && kill -TERM -- "-$pg" 2>/dev/null || true
            done
            sleep 0.5
            kill -KILL "$p" 2>/dev/null || true
        fi
    done
    stop_pidfile munged "$STATE/munged.pid"
    unlink_system_conf
    [ -n "$quiet" ] || log "stopped"
}

cmd_status() {
    local up=0 name
    for name in munged slurmctld slurmd; do
        if pid=$(live_pid "$STATE/$name.pid"); then
            echo "$name: running (pid $pid)"
        else
            echo "$name: not running"
            up=3
        fi
    done
    if [ $up = 0 ] && cluster_answers; then
        SLURM_CONF=$CONF sinfo -N -o "%N %P %T %c %m"
        echo "SLURM_CONF=$CONF"
        return 0
    fi
    return 3
}

case ${1:-} in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# A real one-node Slurm cluster for kerneld's tests (tests/tests/slurm.rs): Debian's
# slurm-wlm + munge, slurmctld and slurmd on this machine, configured for what it has
# (its hostname, its CPUs) plus a count-only `gpu` gres so `--gres=gpu:1` schedules
# without GPUs (the tests run the harness in CPU mode).
#
# Idempotent: installs what is missing (root + apt-get), writes the configuration,
# (re)starts the daemons only when they are not running with this configuration, and
# waits until the node is idle. Prints `slurm test cluster: ready (...)` at the end.
#
#   scripts/slurm-test-cluster.sh          install if needed, start, wait
#   scripts/slurm-test-cluster.sh stop     stop slurmd, slurmctld (munged stays)
#
# Nothing is mocked: the tests submit real jobs and run the harness worker under srun.
set -euo pipefail

PARTITION=kerneld
CONF_DIR=/etc/slurm
LOG_DIR=/var/log/slurm
STATE_DIR=/var/lib/slurm

say() { echo "slurm test cluster: $*"; }
die() { echo "slurm test cluster: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else
        die "needs root (or passwordless sudo) to run: $*"
    fi
}

if [ "${1:-}" = stop ]; then
    for p in slurmd slurmctld; do
        if pid=$(pgrep -x "$p"); then as_root kill $pid || true; fi
    done
    say "stopped"
    exit 0
fi

# -- install ---------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || die "slurm-wlm and munge are not installed and there is no apt-get; install them (Debian/Ubuntu: apt-get install slurm-wlm munge)"
    say "installing slurm-wlm and munge (apt-get)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

HOST=$(hostname -s)
CPUS=$(nproc)
# slurmd -C prints what slurmd detects; the node line must not claim more.
DETECTED=$(slurmd -C | head -1)
SOCKETS=$(sed -n 's/.*SocketsPerBoard=\([0-9]*\).*/\1/p' <<<"$DETECTED")
CORES=$(sed -n 's/.*CoresPerSocket=\([0-9]*\).*/\1/p' <<<"$DETECTED")
THREADS=$(sed -n 's/.*ThreadsPerCore=\([0-9]*\).*/\1/p' <<<"$DETECTED")
SLURM_USER=slurm
id "$SLURM_USER" >/dev/null 2>&1 || SLURM_USER=root

# -- munge -----------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
    say "creating the munge key"
    as_root mkdir -p /etc/munge
    as_root dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    as_root chown munge:munge /etc/munge/munge.key
    as_root chmod 400 /etc/munge/munge.key
fi
if ! munge -n </dev/null >/dev/null 2>&1; then
    say "starting munged"
    as_root mkdir -p /run/munge /var/log/munge /var/lib/munge
    as_root chown munge:munge /run/munge /var/log/munge /var/lib/munge
    as_root runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n </dev/null >/dev/null 2>&1 || die "munged did not start (see /var/log/munge/munged.log)"
fi

# -- configuration ---------------------------------------------------------------
CONF=$(cat <<EOF
# Written by kerneld's scripts/slurm-test-cluster.sh: a one-node test cluster.
ClusterName=kerneld-test
SlurmctldHost=$HOST
SlurmUser=$SLURM_USER
AuthType=auth/munge
StateSaveLocation=$STATE_DIR/slurmctld
SlurmdSpoolDir=$STATE_DIR/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
# No cgroups in a container: processes are tracked by parentage, tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# Ended jobs stay visible to squeue/scontrol for this long (the daemon reads how they ended).
MinJobAge=30
# A job past its limit gets SIGTERM, then SIGKILL after KillWait; no grace beyond the limit.
KillWait=5
OverTimeLimit=0
InactiveLimit=0
# A loaded 2-core CI machine can keep slurmd from answering for a while: a short
# SlurmdTimeout marked the node DOWN and left every test's job PENDING. The node-failure
# test marks the node DOWN itself (scontrol), so nothing here relies on the heartbeat.
MessageTimeout=30
SlurmdTimeout=600
ReturnToService=2
MpiDefault=none
NodeName=$HOST CPUs=$CPUS Sockets=$SOCKETS CoresPerSocket=$CORES ThreadsPerCore=$THREADS Gres=gpu:$CPUS State=UNKNOWN
# DefaultTime keeps a job without --time short; MaxTime is the "small time limit" jobs may ask.
PartitionName=$PARTITION Nodes=$HOST Default=YES DefaultTime=30 MaxTime=120 State=UP
EOF
)
# Slurm 22.05 drops a gpu gres without File= ("Removing file-less GPU"), so each fake GPU
# is a character device that is /dev/null (1:3): schedulable, nothing to open by mistake.
for i in $(seq 0 $((CPUS - 1))); do
    f=/dev/kerneld-fake-gpu$i
    [ -c $f ] || as_root mknod -m 666 $f c 1 3
done
GRES="NodeName=$HOST Name=gpu Count=$CPUS File=/dev/kerneld-fake-gpu[0-$((CPUS - 1))]"

changed=0
if [ "$(cat $CONF_DIR/slurm.conf 2>/dev/null)" != "$CONF" ]; then
    as_root mkdir -p $CONF_DIR
    printf '%s\n' "$CONF" | as_root tee $CONF_DIR/slurm.conf >/dev/null
    changed=1
fi
if [ "$(cat $CONF_DIR/gres.conf 2>/dev/null)" != "$GRES" ]; then
    printf '%s\n' "$GRES" | as_root tee $CONF_DIR/gres.conf >/dev/null
    changed=1
fi
as_root mkdir -p $LOG_DIR $STATE_DIR/slurmctld $STATE_DIR/slurmd
as_root chown "$SLURM_USER" $LOG_DIR $STATE_DIR/slurmctld

# -- daemons ---------------------------------------------------------------------
if [ $changed = 1 ]; then
    for p in slurmd slurmctld; do
        if pid=$(pgrep -x "$p"); then as_root kill $pid || true; fi
    done
    for _ in $(seq 100); do pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || break; sleep 0.1; done
fi
if ! pgrep -x slurmctld >/dev/null; then
    say "starting slurmctld"
    as_root /usr/sbin/slurmctld
fi
if ! pgrep -x slurmd >/dev/null; then
    say "starting slurmd"
    as_root /usr/sbin/slurmd
fi

# -- wait until the node takes jobs ----------------------------------------------
state=""
for _ in $(seq 120); do
    state=$(sinfo -h -n "$HOST" -p $PARTITION -o %T 2>/dev/null | head -1 || true)
    case "$state" in
        idle|mixed|allocated|completing) break ;;
        inval*) die "slurmctld refused node $HOST ($state): $(sinfo -h -R -n "$HOST" -o %E); see $LOG_DIR/slurmctld.log" ;;
        down*|drain*|fail*)
            as_root scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
done
case "$state" in
    idle|mixed|allocated|completing) ;;
    *) die "node $HOST is '${state:-unknown}' after 60 s; see $LOG_DIR/slurmctld.log and $LOG_DIR/slurmd.log" ;;
esac
say "ready (node $HOST, $CPUS CPUs, gres gpu:$CPUS, partition $PARTITION, state $state)"

#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the cluster executor's tests (tests/test_slurm.py)
# and for trying `tracker experiment --executor slurm` without a cluster. Needs root and Debian's
# slurmctld, slurmd, slurm-client and munge packages (.ci/run installs them).
#
#   tools/slurm_local.sh start DIR   write DIR/slurm.conf, start munged, slurmctld and slurmd
#   tools/slurm_local.sh stop DIR    stop the daemons started from DIR
#
# Then: export SLURM_CONF=DIR/slurm.conf (sbatch, squeue and scancel read it).
set -euo pipefail
action="${1:?usage: $0 start|stop DIR}"
dir="$(realpath -m "${2:?usage: $0 start|stop DIR}")"

stop() {
    for daemon in slurmd slurmctld; do
        [ -f "$dir/$daemon.pid" ] && kill "$(cat "$dir/$daemon.pid")" 2>/dev/null || true
    done
}

if [ "$action" = stop ]; then stop; exit 0; fi
[ "$action" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

host="$(hostname -s)"
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
mkdir -p "$dir/state" "$dir/spool" "$dir/log"
# Ports from 46817: not Slurm's defaults, so as not to meet a real cluster's daemons. 8 CPUs on
# any machine (config_overrides): a test's arms run at once, not two at a time on two cores.
cat > "$dir/slurm.conf" <<CONF
ClusterName=tracker-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=46817
SlurmdPort=46818
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=300
KillWait=5
NodeName=$host CPUs=8 RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

mkdir -p /run/munge && chown munge:munge /run/munge
pgrep -x munged >/dev/null || su munge -s /bin/sh -c /usr/sbin/munged
stop
slurmctld -f "$dir/slurm.conf"
slurmd -f "$dir/slurm.conf"
export SLURM_CONF="$dir/slurm.conf"
for _ in $(seq 60); do  # until the node takes jobs
    if sinfo --noheader --states=idle --format=%n 2>/dev/null | grep -q .; then exit 0; fi
    sleep 0.5
done
echo "slurm did not come up; logs in $dir/log" >&2
exit 1

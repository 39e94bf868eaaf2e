#!/bin/bash
# A single-node Slurm on this machine, to try srun with gradflow (Debian's slurm-wlm and
# munge): starts munged, slurmctld and slurmd under DIR, as root, on the ports given, and
# prints the SLURM_CONF to export. `local.sh stop DIR` stops them.
#
#   bash deploy/slurm/local.sh start /tmp/slurm 16817 16818 && export SLURM_CONF=/tmp/slurm/slurm.conf
#   srun -n 2 gradflow train job.toml
set -euo pipefail
cmd=${1:?usage: local.sh start DIR CTLD_PORT SLURMD_PORT | stop DIR}
dir=${2:?the directory}
if [[ $cmd == stop ]]; then
  for p in slurmd slurmctld munged; do
    if [[ -f $dir/$p.pid ]]; then kill "$(cat "$dir/$p.pid")" 2>/dev/null || true; fi
  done
  exit 0
fi
ctld_port=${3:?the slurmctld port}
slurmd_port=${4:?the slurmd port}
for b in munged slurmctld slurmd sinfo; do
  command -v "$b" >/dev/null || { echo "local.sh: $b is missing (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
mkdir -p "$dir"/state "$dir"/spool "$dir"/log
host=$(hostname -s)
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
  --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge.seed"
cat > "$dir/slurm.conf" <<CONF
ClusterName=gradflow
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -i
slurmd
for _ in $(seq 60); do
  if sinfo -h -o %t 2>/dev/null | grep -q idle; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.5
done
echo "local.sh: the node did not come up in 30 s; see $dir/log" >&2
exit 1

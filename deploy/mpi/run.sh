#!/bin/bash
# A gradflow cluster started by Open MPI's mpirun. Each rank finds its index and the count in
# OMPI_COMM_WORLD_RANK/SIZE. On one machine the ranks listen on localhost:2101 and up; across
# machines, list every rank's host:port in HOSTS (one per line, the same file on every
# machine, in rank order: mpirun's --map-by decides which rank runs where).
#
#   bash deploy/mpi/run.sh job.toml 4                      # one machine
#   HOSTS=hosts.txt MPI_HOSTS=mpi-hosts bash deploy/mpi/run.sh job.toml 4
set -euo pipefail
job=${1:-job.toml}
ranks=${2:-2}
export GRADFLOW_CLUSTER_SECRET=${GRADFLOW_CLUSTER_SECRET:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
args=(-n "$ranks" -x GRADFLOW_CLUSTER_SECRET)
if [[ -n ${MPI_HOSTS:-} ]]; then args+=(--hostfile "$MPI_HOSTS"); fi
if [[ $(id -u) == 0 ]]; then args+=(--allow-run-as-root); fi
train=(gradflow train "$job" -w 1)
if [[ -n ${HOSTS:-} ]]; then train+=(--hostfile "$HOSTS"); fi
exec mpirun "${args[@]}" "${train[@]}"

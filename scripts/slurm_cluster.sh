#!/usr/bin/env bash
# A real 2-node SLURM cluster on this machine, everything inside one folder:
# one munged, one slurmctld and two slurmd ("node1", "node2", both on 127.0.0.1). Needs root, slurm-wlm and munge.
# Each node declares 8 GPUs (GRES gpu:8 on empty device files, no real GPU): what a login node sees of GPU nodes, and
# a job that asks for GPUs gets them allocated while its node has none to use. Partitions: debug (default) and gpu.
#
#   bash scripts/slurm_cluster.sh start DIR   # writes DIR/slurm.conf, starts the daemons, waits until both nodes idle
#   SLURM_CONF=DIR/slurm.conf sbatch ...      # talk to it
#   bash scripts/slurm_cluster.sh stop DIR    # stops exactly the daemons it started (pid files in DIR)
#
# Ports: TRL_DS_SLURM_PORT (default 16817) for slurmctld, the next two for the slurmd daemons.
set -euo pipefail

ACTION="${1:?usage: slurm_cluster.sh start|stop DIR}"
DIR="${2:?usage: slurm_cluster.sh start|stop DIR}"
CTLD_PORT="${TRL_DS_SLURM_PORT:-16817}"
CPUS="${TRL_DS_SLURM_CPUS:-2}"

start_munge() {
  mkdir -p "$DIR/munge"
  chmod 700 "$DIR/munge"
  # Our own key, socket and daemon: the machine's munge setup is left alone.
  head -c 1024 /dev/urandom > "$DIR/munge/munge.key"
  chmod 400 "$DIR/munge/munge.key"
  munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munge/munged.seed"
  munge -n -S "$DIR/munge/munge.socket" | unmunge -S "$DIR/munge/munge.socket" >/dev/null
}

write_conf() {
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/dev"
  touch "$DIR"/dev/nvidia{0..7}
  printf 'AutoDetect=off\nNodeName=node[1-2] Name=gpu File=%s/dev/nvidia[0-7]\n' "$DIR" > "$DIR/gres.conf"
  cat > "$DIR/slurm.conf" <<EOF
ClusterName=trlds
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.%n.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.%n.log
KillWait=5
GresTypes=gpu
NodeName=node[1-2] NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=4000 Gres=gpu:8 Port=[$((CTLD_PORT + 1))-$((CTLD_PORT + 2))]
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=node[1-2] MaxTime=INFINITE State=UP
EOF
}

wait_idle() {
  for _ in $(seq 60); do
    if [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = 2 ]; then return 0; fi
    sleep 0.5
  done
  echo "slurm_cluster: nodes did not become idle; see $DIR/*.log" >&2
  sinfo -N >&2 || true
  return 1
}

start() {
  mkdir -p "$DIR"
  DIR="$(cd "$DIR" && pwd)"
  start_munge
  write_conf
  export SLURM_CONF="$DIR/slurm.conf"
  slurmctld -i
  slurmd -N node1
  slurmd -N node2
  wait_idle
  echo "slurm_cluster: up; export SLURM_CONF=$SLURM_CONF"
}

stop() {
  # the SLURM daemons together (one after another took 2 s each), then munged, which they talk to until they end
  stop_daemons slurmd.node2 slurmd.node1 slurmctld
  stop_daemons munged
}

stop_daemons() {
  local name pid pids=()
  for name in "$@"; do
    [ -f "$DIR/$name.pid" ] || continue
    pid="$(cat "$DIR/$name.pid")"
    kill "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$DIR/$name.pid"
  done
  for _ in $(seq 40); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    sleep 0.25
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}

case "$ACTION" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: slurm_cluster.sh start|stop DIR" >&2; exit 2 ;;
esac

# A private Slurm cluster for tests (sourced, not run): munged, slurmctld and one slurmd per node, from
# Debian's slurm-wlm and munge, with the key, slurm.conf, state, spool, logs and pid files all in one
# directory. /etc/slurm and /etc/munge are not read; the ports are picked free, the job ids start at a
# block of their own and the nodes' temporary files stay in the directory, so runs in parallel do not
# collide. Every daemon stops when the script exits, also after a failure or a signal, and the daemons
# of a run that was killed outright are swept by the next run.
#
# Every process of a cluster (daemons, slurmstepd, srun, job tasks, batch scripts) carries SLURM_CONF=
# <its slurm.conf> and PD2BW_SLURM_OWNER=<pid and start time of the script that made it> in its
# environment: that is how slurm_check_clean finds what is left and the sweep finds what is orphaned.
#
# API (needs root; call slurm_require first, it exits 77 = skipped otherwise):
#   slurm_require               exit 77 with a message unless the daemons and clients are installed
#   slurm_require_pd2bw PD2BW   slurm_require, and PD2BW built with MPI (77 otherwise); no leak check
#   slurm_up DIR [CTLD_ADDR NODE ADDR [NODE ADDR ...]]
#                               start a cluster in the empty directory DIR and wait (30 s at most) until
#                               every node is idle; returns 1 with the daemons' log tails otherwise.
#                               Without nodes: one node, this host (hostname -s), at 127.0.0.1. With
#                               nodes: one slurmd per NODE, a test host of lib_hosts.bash (slurmd runs
#                               in its network namespace with its hostname) reached at ADDR, and
#                               slurmctld reached at CTLD_ADDR (the hosts' bridge). Call hosts_up first,
#                               so that the daemons stop before the hosts go. Each node has
#                               max(4, nproc) CPUs, so 4 tasks fit on a 2-core machine. Installs the
#                               teardown trap (EXIT; an EXIT trap set before runs after it).
#   slurm CMD...                run a Slurm client (srun, sbatch, squeue, ...) against this cluster
#   slurm_wait_job ID SECONDS   wait until job ID has ended; prints its state (COMPLETED, FAILED, ...);
#                               cancels it and returns 1 when it is still running after SECONDS
#   slurm_down                  cancel every job, stop the daemons (TERM, then KILL after 10 s), kill
#                               whatever else of this cluster is left (idempotent; the trap calls it)
#   slurm_check_clean           after slurm_down: exit status 0 when no process of this cluster is left;
#                               says which are

SLURM_DIR=""
SLURM_CONF_FILE=""
SLURM_OWNER=""
SLURM_NODES=()
SLURM_ENV=()
SLURM_CPUS=4
SLURM_RUNNING=0

slurm_require() {
  if [ "$(id -u)" != 0 ]; then echo "a test Slurm cluster needs root (daemons as root): skipped"; exit 77; fi
  local cmd
  for cmd in munged mungekey slurmctld slurmd srun sbatch squeue sinfo scontrol scancel; do
    command -v "$cmd" >/dev/null || PATH="$PATH:/usr/sbin" command -v "$cmd" >/dev/null ||
      { echo "no '$cmd' (tools/setup installs slurm-wlm and munge): skipped"; exit 77; }
  done
  PATH="$PATH:/usr/sbin"
}

# slurm_require_pd2bw PD2BW: slurm_require, and a pd2bw built with MPI (exit 77 otherwise); OpenMPI's own
# allocations are left out of the leak check.
slurm_require_pd2bw() {
  slurm_require
  "$1" --version | grep -q "transports:.*mpi" || { echo "pd2bw built without MPI: skipped"; exit 77; }
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}

_slurm_start_time() { awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null; }

# _slurm_marked VAR=VALUE: the pids of the processes whose environment holds exactly VAR=VALUE.
_slurm_marked() {
  grep -lszxF -- "$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vx "$$" || true
}

# _slurm_sweep: kills the processes of clusters whose owner is gone (a test killed by a timeout).
_slurm_sweep() {
  local owner pid start
  for owner in $(grep -hoszaE 'PD2BW_SLURM_OWNER=[0-9]+\.[0-9]+' /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' |
                 sort -u | cut -d= -f2); do
    pid=${owner%%.*}
    start=${owner#*.}
    [ -r "/proc/$pid/stat" ] && [ "$(_slurm_start_time "$pid")" = "$start" ] && continue
    echo "slurm: killing the processes of a Slurm test cluster whose owner ($pid) is gone" >&2
    for pid in $(_slurm_marked "PD2BW_SLURM_OWNER=$owner"); do kill -KILL "$pid" 2>/dev/null; done
  done
}

# _slurm_free_ports: prints two TCP ports that are free now.
_slurm_free_ports() {
  "${PD2BW_PYTHON:-/usr/bin/python3}" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("", 0))
print(*[x.getsockname()[1] for x in s])'
}

# _slurm_write_conf CTLD_ADDR CTLD_PORT SLURMD_PORT NODE ADDR [NODE ADDR ...]
_slurm_write_conf() {
  local ctld_addr="$1" ctld_port="$2" slurmd_port="$3" d="$SLURM_DIR" names=""
  shift 3
  {
    echo "ClusterName=pd2bwtest"
    echo "SlurmctldHost=$(hostname -s)($ctld_addr)"
    echo "SlurmctldPort=$ctld_port"
    echo "SlurmdPort=$slurmd_port"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$d/munge.socket"
    echo "StateSaveLocation=$d/ctld"
    echo "SlurmdSpoolDir=$d/spool/%n"
    echo "SlurmctldPidFile=$d/slurmctld.pid"
    echo "SlurmdPidFile=$d/slurmd.%n.pid"
    echo "SlurmctldLogFile=$d/slurmctld.log"
    echo "SlurmdLogFile=$d/slurmd.%n.log"
    echo "TmpFS=$d/tmp/%n"
    echo "MailProg=/bin/true"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "SlurmdParameters=config_overrides"
    echo "FirstJobId=$((ctld_port * 1000))"
    while [ $# -gt 0 ]; do
      echo "NodeName=$1 NodeAddr=$2 CPUs=$SLURM_CPUS Sockets=1 CoresPerSocket=$SLURM_CPUS ThreadsPerCore=1 State=UNKNOWN"
      names+="${names:+,}$1"
      shift 2
    done
    echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
  } >"$SLURM_CONF_FILE"
}

slurm() { "${SLURM_ENV[@]}" "$@"; }

_slurm_install_trap() {
  local previous
  previous=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
  # shellcheck disable=SC2064  # the previous handler is fixed now, on purpose
  trap "slurm_down; $previous" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# _slurm_wait SECONDS CMD...: runs CMD every 0.2 s until it succeeds; fails after SECONDS.
_slurm_wait() {
  local deadline=$(($(date +%s) + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

_slurm_all_idle() {
  local states
  states=$(slurm sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  [ "$(grep -c ' idle$' <<<"$states")" = "$((${#SLURM_NODES[@]} / 2))" ]
}

_slurm_log_tails() {
  local f
  for f in "$SLURM_DIR"/*.log; do
    [ -e "$f" ] || continue
    echo "--- $f (last lines)" >&2
    tail -n 8 "$f" >&2
  done
}

# _slurm_start_ctld CTLD_ADDR: slurmctld on free ports, tried 3 times (a port may be taken meanwhile).
_slurm_start_ctld() {
  local ports
  for _ in 1 2 3; do
    read -r -a ports < <(_slurm_free_ports) || return 1
    _slurm_write_conf "$1" "${ports[0]}" "${ports[1]}" "${SLURM_NODES[@]}"
    slurm slurmctld || return 1
    _slurm_wait 10 slurm scontrol ping && return 0
    _slurm_stop_pidfile "$SLURM_DIR/slurmctld.pid"
    grep -q "Address already in use" "$SLURM_DIR/slurmctld.log" 2>/dev/null || return 1
    rm -f "$SLURM_DIR/slurmctld.log"
  done
  return 1
}

# _slurm_start_slurmds IN_HOSTS: a slurmd per node, in its test host when IN_HOSTS is 1.
_slurm_start_slurmds() {
  local i node
  for ((i = 0; i < ${#SLURM_NODES[@]}; i += 2)); do
    node="${SLURM_NODES[$i]}"
    mkdir -p "$SLURM_DIR/spool/$node" "$SLURM_DIR/tmp/$node" || return 1
    if [ "$1" = 1 ]; then
      # Into the host's network namespace and a UTS namespace with its name, as hosts_exec does, but
      # without `ip netns exec`, whose fresh /sys has no cgroup mounts (slurmd fails without them).
      # shellcheck disable=SC2016  # expanded by that sh
      nsenter --net="/run/netns/$node" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" \
        "${SLURM_ENV[@]}" slurmd -N "$node" || return 1
    else
      slurm slurmd -N "$node" || return 1
    fi
  done
}

slurm_up() {
  SLURM_DIR="$1"
  shift
  SLURM_CONF_FILE="$SLURM_DIR/slurm.conf"
  SLURM_OWNER="$$.$(_slurm_start_time $$)"
  SLURM_ENV=(env "SLURM_CONF=$SLURM_CONF_FILE" "PD2BW_SLURM_OWNER=$SLURM_OWNER")
  SLURM_CPUS=$(nproc)
  [ "$SLURM_CPUS" -ge 4 ] || SLURM_CPUS=4
  local ctld_addr=127.0.0.1 in_hosts=0
  if [ $# -eq 0 ]; then
    SLURM_NODES=("$(hostname -s)" 127.0.0.1)
  else
    ctld_addr="$1"
    shift
    SLURM_NODES=("$@")
    in_hosts=1
  fi
  _slurm_install_trap
  SLURM_RUNNING=1
  _slurm_sweep
  mkdir -p "$SLURM_DIR/ctld" "$SLURM_DIR/tmp" || return 1
  mungekey -c -k "$SLURM_DIR/munge.key" || return 1
  slurm munged --force --socket="$SLURM_DIR/munge.socket" --key-file="$SLURM_DIR/munge.key" \
    --log-file="$SLURM_DIR/munged.log" --pid-file="$SLURM_DIR/munged.pid" --seed-file="$SLURM_DIR/munged.seed" ||
    { _slurm_log_tails; return 1; }
  if ! _slurm_start_ctld "$ctld_addr"; then
    echo "slurm: slurmctld did not answer within 10 s" >&2; _slurm_log_tails; return 1
  fi
  _slurm_start_slurmds "$in_hosts" || { _slurm_log_tails; return 1; }
  if ! _slurm_wait 30 _slurm_all_idle; then
    echo "slurm: the nodes are not idle after 30 s:" >&2
    slurm sinfo -N >&2
    _slurm_log_tails
    return 1
  fi
}

slurm_wait_job() {
  local id="$1" deadline=$(($(date +%s) + $2)) state
  while :; do
    state=$(slurm scontrol show job -o "$id" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2)
    case "$state" in
      PENDING | RUNNING | CONFIGURING | COMPLETING | SUSPENDED | "") ;;
      *) echo "$state"; return 0 ;;
    esac
    if [ "$(date +%s)" -ge "$deadline" ]; then
      slurm scancel "$id" 2>/dev/null
      echo "slurm: job $id still ${state:-unknown} after $2 s: cancelled" >&2
      return 1
    fi
    sleep 0.3
  done
}

# _slurm_stop_pidfile FILE: TERM the daemon in FILE (when it is one of this cluster), KILL after 10 s.
_slurm_stop_pidfile() {
  local pid i
  pid=$(cat "$1" 2>/dev/null) || return 0
  grep -qszxF -- "SLURM_CONF=$SLURM_CONF_FILE" "/proc/$pid/environ" || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 50); do
    grep -qszxF -- "SLURM_CONF=$SLURM_CONF_FILE" "/proc/$pid/environ" || return 0
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null
}

slurm_down() {
  [ -n "$SLURM_DIR" ] && [ "$SLURM_RUNNING" = 1 ] || return 0
  local jobs f pid
  if _slurm_ctld_alive && jobs=$(timeout 5 "${SLURM_ENV[@]}" squeue -h -o %A 2>/dev/null) && [ -n "$jobs" ]; then
    # shellcheck disable=SC2086  # one id per word
    timeout 5 "${SLURM_ENV[@]}" scancel $jobs 2>/dev/null
    _slurm_wait 10 _slurm_no_jobs
  fi
  for f in "$SLURM_DIR"/slurmd.*.pid; do [ -e "$f" ] && _slurm_stop_pidfile "$f"; done
  _slurm_stop_pidfile "$SLURM_DIR/slurmctld.pid"
  _slurm_stop_pidfile "$SLURM_DIR/munged.pid"
  for pid in $(_slurm_marked "SLURM_CONF=$SLURM_CONF_FILE"); do kill -KILL "$pid" 2>/dev/null; done
  _slurm_wait 5 _slurm_none_left
  SLURM_RUNNING=0
}

_slurm_ctld_alive() {
  local pid
  pid=$(cat "$SLURM_DIR/slurmctld.pid" 2>/dev/null) &&
    grep -qszxF -- "SLURM_CONF=$SLURM_CONF_FILE" "/proc/$pid/environ"
}

_slurm_no_jobs() { [ -z "$(timeout 5 "${SLURM_ENV[@]}" squeue -h -o %A 2>/dev/null)" ]; }
_slurm_none_left() { [ -z "$(_slurm_marked "SLURM_CONF=$SLURM_CONF_FILE")" ]; }

slurm_check_clean() {
  [ -n "$SLURM_DIR" ] || return 0
  local left
  left=$(_slurm_marked "SLURM_CONF=$SLURM_CONF_FILE")
  [ -z "$left" ] && return 0
  echo "left behind by the Slurm test cluster in $SLURM_DIR:" >&2
  ps -o pid=,args= -p "$(paste -sd, <<<"$left")" >&2
  return 1
}

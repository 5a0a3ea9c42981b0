# Test hosts on one machine (sourced, not run): N "hosts", each a Linux network namespace with its own
# address, joined by veth pairs to a bridge in the root namespace, with the links between hosts shaped
# by tc (tbf, 1 Gbit/s by default). Ranks of one host talk through shared memory, ranks of two hosts
# over TCP through the shaped links. Everything a run makes is torn down when the script exits, also
# after a failure or a signal, and a run killed outright is swept by the next run.
#
# Addresses: only 10.213.0.0/16. Each run takes one free /24 (10.213.K.0/24): host i is 10.213.K.i, the
# bridge (where mpirun itself runs) 10.213.K.254. Names carry a random run id, so parallel runs never
# collide: hosts (namespace = hostname = /etc/hosts name) pd<id>-h<i>, bridge pdbr<id>, root-side veth
# pdv<id>h<i>; /etc/hosts lines end in "# pd2bw-hosts <id>"; state in /run/pd2bw-hosts/<id>/.
#
# API (needs root and iproute2; call hosts_require first, it exits 77 = skipped otherwise):
#   hosts_require                 exit 77 with a message unless this machine can make test hosts
#   hosts_up N [RATE]             make N hosts with links shaped to RATE (tc units, default 1gbit) and
#                                 install the teardown trap (EXIT, INT, TERM; an EXIT trap set before is
#                                 kept and run after it). Sets:
#                                   HOSTS_ID     the run id
#                                   HOSTS        host names, HOSTS[0] is host 1
#                                   HOSTS_ADDR   their addresses, same order
#                                   HOSTS_SUBNET e.g. 10.213.7.0/24
#                                   HOSTS_AGENT  the rsh agent for mpirun (a copy of tests/cluster/nsagent)
#   hosts_exec HOST CMD...        run CMD inside HOST (its network namespace and hostname)
#   hosts_mpirun PER_HOST         fill the array HOSTS_MPI with an mpirun command line (no program) that
#                                 starts PER_HOST ranks on each host, in host order: ranks
#                                 0..PER_HOST-1 on HOSTS[0], and so on. The environment of the caller
#                                 reaches the ranks (the agent is a local process, not ssh).
#                                 Use: "${HOSTS_MPI[@]}" pd2bw train --plan p.json
#   hosts_cut HOST                cut HOST's link (both veth ends down): its ranks lose every peer
#   hosts_pids HOST               print the pids of the processes running inside HOST
#   hosts_down                    tear everything down (idempotent; the trap calls it too)
#   hosts_check_clean             after hosts_down: exit status 0 when nothing of this run is left
#                                 (namespaces, links, qdiscs, /etc/hosts lines, state); else says
#                                 on stderr what is left

HOSTS_PREFIX=10.213
HOSTS_STATE_ROOT=/run/pd2bw-hosts
HOSTS_LOCK=/run/lock/pd2bw-hosts.lock
HOSTS_ID=""
HOSTS=()
HOSTS_ADDR=()
HOSTS_SUBNET=""
HOSTS_AGENT=""
HOSTS_MPI=()

hosts_require() {
  if [ "$(id -u)" != 0 ]; then echo "test hosts need root (network namespaces): skipped"; exit 77; fi
  local cmd
  for cmd in ip tc unshare flock mpirun; do
    command -v "$cmd" >/dev/null || { echo "test hosts need '$cmd': skipped"; exit 77; }
  done
  local probe="pdprobe$$" why=""
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "'ip netns add' does not work here (no network namespaces): skipped"; exit 77
  fi
  # What the hosts need of the kernel, tried inside the probe namespace: veth pairs and tbf.
  ip -n "$probe" link add pdprobe0 type veth peer name pdprobe1 2>/dev/null || why="no veth pairs"
  [ -z "$why" ] && ! tc -n "$probe" qdisc add dev pdprobe0 root tbf rate 1gbit burst 128kb latency 50ms 2>/dev/null &&
    why="no tbf qdisc"
  ip netns del "$probe"
  if [ -n "$why" ]; then echo "this kernel cannot make the test hosts ($why): skipped"; exit 77; fi
}

# _hosts_alive STATE_DIR: whether the run that owns STATE_DIR still runs (pid and its start time).
_hosts_alive() {
  local pid start
  pid=$(cat "$1/pid" 2>/dev/null) || return 1
  start=$(cat "$1/start" 2>/dev/null) || return 1
  [ -r "/proc/$pid/stat" ] && [ "$(_hosts_start_time "$pid")" = "$start" ]
}
_hosts_start_time() { awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null; }

# _hosts_teardown ID: removes everything of run ID; run with the lock held.
_hosts_teardown() {
  local id="$1" ns pid link
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^pd$id-h[0-9]+$"); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
                grep -E "^(pdbr$id|pdv${id}h[0-9]+)$"); do
    ip link del "$link" 2>/dev/null
  done
  if grep -qF "# pd2bw-hosts $id" /etc/hosts; then
    local kept
    kept=$(grep -vF "# pd2bw-hosts $id" /etc/hosts)
    # In place (not a rename): /etc/hosts may be a mount point.
    printf '%s\n' "$kept" >/etc/hosts
  fi
  rm -rf "${HOSTS_STATE_ROOT:?}/$id"
}

# _hosts_sweep: tears down the runs whose owner is gone (killed by a timeout, say); lock held.
_hosts_sweep() {
  local dir
  for dir in "$HOSTS_STATE_ROOT"/*/; do
    [ -d "$dir" ] || continue
    _hosts_alive "$dir" || _hosts_teardown "$(basename "$dir")"
  done
}

# _hosts_free_subnet: prints a third octet K whose 10.213.K.0/24 no live run holds.
_hosts_free_subnet() {
  local k used
  used=$(cat "$HOSTS_STATE_ROOT"/*/subnet 2>/dev/null)
  for k in $(seq 1 253); do
    grep -qx "$k" <<<"$used" && continue
    ip -4 route show | grep -q "^$HOSTS_PREFIX\.$k\.0/24" && continue
    echo "$k"; return 0
  done
  return 1
}

hosts_up() {
  local n="$1" rate="${2:-1gbit}" i k
  [ "$n" -ge 1 ] && [ "$n" -le 32 ] || { echo "hosts_up: 1 to 32 hosts, not '$n'" >&2; return 2; }
  HOSTS_ID=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
  _hosts_install_trap
  mkdir -p "$HOSTS_STATE_ROOT" "$(dirname "$HOSTS_LOCK")"
  exec {HOSTS_LOCK_FD}>"$HOSTS_LOCK"
  flock "$HOSTS_LOCK_FD"
  _hosts_sweep
  if ! k=$(_hosts_free_subnet); then
    exec {HOSTS_LOCK_FD}>&-; echo "hosts_up: no free /24 left in $HOSTS_PREFIX.0.0/16" >&2; return 1
  fi
  local state="$HOSTS_STATE_ROOT/$HOSTS_ID"
  mkdir -p "$state"
  echo "$$" >"$state/pid"
  _hosts_start_time "$$" >"$state/start"
  echo "$k" >"$state/subnet"
  HOSTS_SUBNET="$HOSTS_PREFIX.$k.0/24"
  HOSTS=()
  HOSTS_ADDR=()
  for i in $(seq 1 "$n"); do
    HOSTS+=("pd$HOSTS_ID-h$i")
    HOSTS_ADDR+=("$HOSTS_PREFIX.$k.$i")
  done
  local lines=""
  for i in "${!HOSTS[@]}"; do lines+="${HOSTS_ADDR[$i]} ${HOSTS[$i]} # pd2bw-hosts $HOSTS_ID"$'\n'; done
  printf '%s' "$lines" >>/etc/hosts
  flock -u "$HOSTS_LOCK_FD"
  exec {HOSTS_LOCK_FD}>&-
  _hosts_make_links "$k" "$rate" || { echo "hosts_up: could not make the hosts' links" >&2; return 1; }
  HOSTS_AGENT="$state/nsagent"
  cp "$(dirname "${BASH_SOURCE[0]}")/nsagent" "$HOSTS_AGENT" && chmod 755 "$HOSTS_AGENT"
}

# _hosts_make_links K RATE: the bridge, one namespace and veth pair per host, addresses, tbf on both ends.
_hosts_make_links() {
  local k="$1" rate="$2" br="pdbr$HOSTS_ID" i
  local tbf=(tbf rate "$rate" burst 128kb latency 50ms)
  ip link add "$br" type bridge || return 1
  ip addr add "$HOSTS_PREFIX.$k.254/24" dev "$br" || return 1
  ip link set "$br" up || return 1
  for i in "${!HOSTS[@]}"; do
    local h="${HOSTS[$i]}" v="pdv${HOSTS_ID}h$((i + 1))"
    ip netns add "$h" || return 1
    ip link add "$v" type veth peer name eth0 netns "$h" || return 1
    ip link set "$v" master "$br" up || return 1
    ip -n "$h" addr add "${HOSTS_ADDR[$i]}/24" dev eth0 || return 1
    ip -n "$h" link set eth0 up || return 1
    ip -n "$h" link set lo up || return 1
    tc -n "$h" qdisc add dev eth0 root "${tbf[@]}" || return 1
    tc qdisc add dev "$v" root "${tbf[@]}" || return 1
  done
}

_hosts_install_trap() {
  local previous
  previous=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
  # shellcheck disable=SC2064  # the previous handler is fixed now, on purpose
  trap "hosts_down; $previous" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

hosts_exec() {
  local h="$1"
  shift
  ip netns exec "$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

hosts_mpirun() {
  local per="$1" h list=""
  for h in "${HOSTS[@]}"; do list+="${list:+,}$h:$per"; done
  # odls_base_sigkill_timeout: OpenMPI 4.1 counts the wait between its SIGTERM and its SIGKILL in whole
  # seconds of the clock, so the default 1 can be a millisecond, too short for a rank to run its SIGTERM
  # handler (and say where to resume from) on a busy machine; 2 gives it at least a second.
  # shellcheck disable=SC2034,SC2054  # the caller's array; the commas are OpenMPI's lists
  HOSTS_MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np $((per * ${#HOSTS[@]}))
             --mca odls_base_sigkill_timeout 2
             --host "$list" --mca plm_rsh_agent "$HOSTS_AGENT" --mca plm_rsh_no_tree_spawn 1
             --mca oob_tcp_if_include "$HOSTS_SUBNET" --mca btl_tcp_if_include "$HOSTS_SUBNET"
             --mca btl self,vader,tcp)
}

hosts_cut() {
  local i
  for i in "${!HOSTS[@]}"; do
    if [ "${HOSTS[$i]}" = "$1" ]; then
      ip -n "$1" link set eth0 down
      ip link set "pdv${HOSTS_ID}h$((i + 1))" down
      return
    fi
  done
  echo "hosts_cut: no host '$1'" >&2
  return 2
}

hosts_pids() { ip netns pids "$1"; }

hosts_down() {
  [ -n "$HOSTS_ID" ] || return 0
  mkdir -p "$(dirname "$HOSTS_LOCK")"
  (
    flock 9
    _hosts_teardown "$HOSTS_ID"
  ) 9>"$HOSTS_LOCK"
}

hosts_check_clean() {
  local id="$HOSTS_ID" left
  [ -n "$id" ] || return 0
  left=$(
    ip netns list | awk '{print $1}' | grep -E "^pd$id-h" | sed 's/^/namespace /'
    ip -o link show | awk -F': ' '{print $2}' | grep -E "^pd(br|v)$id" | sed 's/^/link /'
    tc qdisc show | grep -E "pd(br|v)$id" | sed 's/^/qdisc /'
    grep -F "# pd2bw-hosts $id" /etc/hosts | sed 's/^/\/etc\/hosts: /'
    [ -e "$HOSTS_STATE_ROOT/$id" ] && echo "state $HOSTS_STATE_ROOT/$id"
  )
  if [ -n "$left" ]; then
    echo "left behind by test hosts $id:" >&2
    echo "$left" >&2
    return 1
  fi
}

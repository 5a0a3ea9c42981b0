#!/usr/bin/env bash
# The test hosts themselves (tests/cluster/lib_hosts.bash): each host has its own name and address, the
# hosts reach each other by name, TCP between two hosts runs at the shaped rate while TCP inside one host
# does not, and every run leaves nothing behind: not after a normal end, not after a failure or a
# SIGTERM, and a run killed outright (SIGKILL) is swept by the next one. Skips (77) without root or
# network namespaces.
source "$(dirname "$0")/../cli/lib.bash"
source "$(dirname "$0")/lib_hosts.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
LIB="$(dirname "$0")/lib_hosts.bash"
hosts_require

# clean_id ID: nothing of run ID is left.
clean_id() { (HOSTS_ID="$1" hosts_check_clean); }

# "${CHILD[@]}" BODY: another run (a process of its own) that makes 2 hosts, writes its run id to
# $TMP/id, then runs BODY.
CHILD=(bash -c 'source "$0"; hosts_up 2 || exit 9; echo "$HOSTS_ID" >"$1/id"; eval "$2"' "$LIB" "$TMP")

# 1. Names, addresses, /etc/hosts.
hosts_up 3
[ "${#HOSTS[@]}" = 3 ] && ok || fail "hosts_up 3 made ${#HOSTS[@]} hosts"
for i in 0 1 2; do
  [ "$(hosts_exec "${HOSTS[$i]}" hostname)" = "${HOSTS[$i]}" ] && ok || fail "${HOSTS[$i]} has the wrong hostname"
  hosts_exec "${HOSTS[$i]}" ip -4 -o addr show dev eth0 | grep -q "inet ${HOSTS_ADDR[$i]}/24" && ok ||
    fail "${HOSTS[$i]} lacks its address ${HOSTS_ADDR[$i]}"
  [ "$(getent hosts "${HOSTS[$i]}" | awk '{print $1}')" = "${HOSTS_ADDR[$i]}" ] && ok ||
    fail "${HOSTS[$i]} does not resolve to ${HOSTS_ADDR[$i]}"
done
case "$HOSTS_SUBNET" in 10.213.*.0/24) ok ;; *) fail "subnet $HOSTS_SUBNET is outside 10.213.0.0/16" ;; esac
# Host 1 sees only its own address and loopback: no other interface of the machine.
own=$(hosts_exec "${HOSTS[0]}" ip -o -4 addr show | awk '{print $4}' | sort | tr '\n' ' ')
[ "$own" = "${HOSTS_ADDR[0]}/24 127.0.0.1/8 " ] && ok || fail "host 1 has addresses other than its own: $own"

# 2. The links: 16 MiB over TCP, from host 1 to host 2 (shaped to 1 Gbit/s = 0.125 GB/s; the bound is
#    0.05-0.14 GB/s, TCP's overhead and a loaded machine below, tbf's 128 kB burst above) and inside host 1
#    (loopback, unshaped: at least 2x faster; 4-15x here, CPU-bound on a loaded machine).
cat >"$TMP/sink.py" <<'PYEOF'
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); open(sys.argv[3], "w").close()
c, _ = s.accept(); got = 0; start = None
while True:
    data = c.recv(1 << 20)
    if not data: break
    if start is None: start = time.perf_counter()
    got += len(data)
print("%.6f" % (got / (time.perf_counter() - start) / 1e9))
PYEOF
cat >"$TMP/source.py" <<'PYEOF'
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2]))); s.sendall(b"x" * (16 << 20)); s.close()
PYEOF
# rate SINK_HOST SINK_ADDR SOURCE_HOST: GB/s of 16 MiB from SOURCE_HOST to SINK_ADDR
rate() {
  rm -f "$TMP/listening"
  hosts_exec "$1" "$PY" "$TMP/sink.py" "$2" 5555 "$TMP/listening" >"$TMP/rate" &
  local sink=$!
  for _ in $(seq 100); do [ -e "$TMP/listening" ] && break; sleep 0.1; done
  hosts_exec "$3" "$PY" "$TMP/source.py" "$2" 5555
  wait "$sink"
  cat "$TMP/rate"
}
between=$(rate "${HOSTS[1]}" "${HOSTS_ADDR[1]}" "${HOSTS[0]}")
inside=$(rate "${HOSTS[0]}" 127.0.0.1 "${HOSTS[0]}")
echo "TCP: host 1 -> host 2 $between GB/s, inside host 1 $inside GB/s"
"$PY" -c "import sys; b, i = map(float, sys.argv[1:]); assert 0.05 <= b <= 0.14 and i >= 2 * b" "$between" "$inside" &&
  ok || fail "the links are not shaped as set: between hosts $between GB/s, inside one $inside GB/s"
# A host's name reaches it too (what mpirun and its daemons use).
between_named=$(rate "${HOSTS[2]}" "${HOSTS[2]}" "${HOSTS[1]}")
[ -n "$between_named" ] && ok || fail "host 3 is not reachable by name from host 2"

# hosts_pids sees a process inside a host; hosts_cut takes a host off the network (host 3 here).
(hosts_exec "${HOSTS[2]}" sleep 30) 2>/dev/null &
sleeper=$!
for _ in $(seq 50); do [ -n "$(hosts_pids "${HOSTS[2]}")" ] && break; sleep 0.1; done
[ -n "$(hosts_pids "${HOSTS[2]}")" ] && [ -z "$(hosts_pids "${HOSTS[1]}")" ] && ok ||
  fail "hosts_pids does not list the processes inside a host (and only those)"
kill "$(hosts_pids "${HOSTS[2]}")" 2>/dev/null
wait "$sleeper" 2>/dev/null
cat >"$TMP/connect.py" <<'PYEOF'
import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), timeout=2)
except ConnectionRefusedError:
    print("reached")  # the host answered: nothing listens on port 9
except OSError as e:
    print("unreachable: %s" % e)
PYEOF
[ "$(hosts_exec "${HOSTS[1]}" "$PY" "$TMP/connect.py" "${HOSTS_ADDR[2]}")" = reached ] && ok ||
  fail "host 3 does not answer before the cut"
hosts_cut "${HOSTS[2]}"
case "$(hosts_exec "${HOSTS[1]}" "$PY" "$TMP/connect.py" "${HOSTS_ADDR[2]}")" in
  unreachable*) ok ;; *) fail "host 3 still answers after hosts_cut" ;;
esac

# 3. Two runs at once get different names and subnets (a child holds its hosts while this run has its own).
"${CHILD[@]}" 'echo "$HOSTS_SUBNET" >"$1/subnet"; sleep 30 & echo $! >"$1/sleeper"; wait' &
holder=$!
for _ in $(seq 100); do [ -s "$TMP/subnet" ] && break; sleep 0.1; done
[ -s "$TMP/subnet" ] && [ "$(cat "$TMP/subnet")" != "$HOSTS_SUBNET" ] && [ "$(cat "$TMP/id")" != "$HOSTS_ID" ] && ok ||
  fail "a second run did not get its own subnet and names"
kill -TERM "$holder"
wait "$holder"
[ $? = 143 ] && ok || fail "a run killed by SIGTERM did not exit 143"
clean_id "$(cat "$TMP/id")" && ok || fail "a run ended by SIGTERM left its hosts behind"
kill "$(cat "$TMP/sleeper")" 2>/dev/null

# 4. A failing run (exit 3 after hosts_up) tears down and keeps its exit status.
rm -f "$TMP/id"
"${CHILD[@]}" 'exit 3'
[ $? = 3 ] && ok || fail "a failing run's exit status was not kept"
clean_id "$(cat "$TMP/id")" && ok || fail "a failing run left its hosts behind"

# 5. An EXIT trap set before hosts_up still runs after the teardown.
bash -c 'trap "echo earlier-trap >\"$1/trap\"" EXIT; source "$0"; hosts_up 1; exit 0' "$LIB" "$TMP"
grep -q earlier-trap "$TMP/trap" 2>/dev/null && ok || fail "hosts_up dropped the EXIT trap set before it"

# 6. A run killed outright leaves its hosts; the next hosts_up sweeps them.
rm -f "$TMP/id"
"${CHILD[@]}" 'sleep 60 & echo $! >"$1/sleeper"; wait' &
killed=$!
for _ in $(seq 100); do [ -s "$TMP/id" ] && break; sleep 0.1; done
sleep 0.5  # let it finish making its links
kill -KILL "$killed"
wait "$killed" 2>/dev/null
kill "$(cat "$TMP/sleeper")" 2>/dev/null
clean_id "$(cat "$TMP/id")" 2>/dev/null && fail "SIGKILL left nothing: this check cannot see leftovers" || ok
bash -c 'source "$0"; hosts_up 1' "$LIB"
clean_id "$(cat "$TMP/id")" && ok || fail "the next run did not sweep the hosts of a killed run"

# 7. This run's own teardown.
hosts_down
hosts_check_clean && ok || fail "hosts_down left something behind"
finish

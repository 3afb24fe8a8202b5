#!/usr/bin/env bash
# The main job (`make demo`): a three-node vmqpy cluster on 127.0.0.11-13, joined with vmq-admin; a publish on
# one node reaching subscribers on the others (MQTT 3.1.1 and 5.0, real mosquitto clients); a retained message
# replicated to every node and surviving kill -9 of a node; a short netsplit experiment on that cluster (chaos,
# iptables) with its verdict; the Spark convergence report of the experiment's logs (report.html). The cluster
# is left running for the status page; `make demo-stop` (`scripts/demo.sh stop`) stops it by the PIDs it wrote in
# demo-data/pids.
set -euo pipefail
cd "$(dirname "$0")/.."
VMQPY=.venv/bin/vmqpy
ADMIN=.venv/bin/vmq-admin
DIR=demo-data
MQTT_PORT=${DEMO_MQTT_PORT:-1883}
HTTP_PORT=${DEMO_HTTP_PORT:-8888}
CLUSTER_PORT=${DEMO_CLUSTER_PORT:-44053}
NODES=(1 2 3)
PIDFILE=$DIR/pids
declare -A PIDS=()

host() { echo "127.0.0.1$1"; }
name() { echo "n$1@$(host "$1")"; }

stop_node() {
  local i=$1 pid=${PIDS[$1]:-}
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  PIDS[$i]=""
}
stop_all() { for i in "${NODES[@]}"; do stop_node "$i"; done; }

# `scripts/demo.sh stop` (make demo-stop): the nodes a finished demo left running, by their PIDs, each only while
# that PID is still a vmqpy node of this demo (a PID the system gave to another process since is left alone).
if [ "${1:-}" = stop ]; then
  if [ ! -f "$PIDFILE" ]; then echo "no demo cluster is running ($PIDFILE not found)"; exit 0; fi
  while read -r i pid; do
    if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "vmqpy start --config $DIR/n$i/vmqpy.conf"; then
      PIDS[$i]=$pid
      stop_node "$i"
      echo "stopped n$i (pid $pid)"
    else
      echo "n$i (pid $pid) was no longer running"
    fi
  done < "$PIDFILE"
  rm -f "$PIDFILE"
  exit 0
fi
trap stop_all EXIT

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

start_node() {
  local i=$1 h
  h=$(host "$i")
  mkdir -p "$DIR/n$i"
  cat > "$DIR/n$i/vmqpy.conf" <<CONF
nodename = $(name "$i")
platform_data_dir = $DIR/n$i/data
listener.tcp.default = $h:$MQTT_PORT
listener.http.default = $h:$HTTP_PORT
listener.vmq.clustering = $h:$CLUSTER_PORT
distributed_cookie = vmqpy-demo
# the demo's clients (mosquitto_pub/sub, the chaos workload) connect without a user name
allow_anonymous = on
CONF
  # stdin and stdout away from the terminal too: the node outlives this script (`make demo | tee` must end)
  "$VMQPY" start --config "$DIR/n$i/vmqpy.conf" </dev/null >>"$DIR/n$i/node.log" 2>&1 &
  PIDS[$i]=$!
  for _ in $(seq 1 150); do
    port_open "$h" "$HTTP_PORT" && return 0
    kill -0 "${PIDS[$i]}" 2>/dev/null || { echo "node $i exited; see $DIR/n$i/node.log" >&2; tail -5 "$DIR/n$i/node.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "node $i did not open $h:$HTTP_PORT within 15 s" >&2
  exit 1
}

admin() { local i=$1; shift; "$ADMIN" --url "http://$(host "$i"):$HTTP_PORT" --data-dir "$DIR/n$i/data" "$@"; }

for i in "${NODES[@]}"; do
  if port_open "$(host "$i")" "$MQTT_PORT" || port_open "$(host "$i")" "$HTTP_PORT"; then
    echo "$(host "$i") already has something on port $MQTT_PORT or $HTTP_PORT; stop it (an earlier demo: make demo-stop) or set DEMO_MQTT_PORT/DEMO_HTTP_PORT" >&2
    exit 1
  fi
done
rm -rf "$DIR"
mkdir -p "$DIR"

echo "== starting three nodes (logs: $DIR/n*/node.log)"
for i in "${NODES[@]}"; do start_node "$i"; echo "   $(name "$i"): MQTT $(host "$i"):$MQTT_PORT, admin http://$(host "$i"):$HTTP_PORT, pid ${PIDS[$i]}"; done
echo "   status page: http://$(host 1):$HTTP_PORT/status"

echo "== vmq-admin cluster join on n2 and n3 (discovery node n1)"
admin 2 cluster join "discovery-node=$(name 1):$CLUSTER_PORT"
admin 3 cluster join "discovery-node=$(name 1):$CLUSTER_PORT"
for _ in $(seq 1 100); do
  [ "$(admin 1 cluster show --json | grep -o '"Ready": true' | wc -l)" = 3 ] && break
  sleep 0.2
done
echo "== vmq-admin cluster show (on n1)"
admin 1 cluster show

for version in mqttv311 mqttv5; do
  echo "== $version: mosquitto_sub on n2 and n3, mosquitto_pub on n1 (QoS 1)"
  rm -f "$DIR/recv2.txt" "$DIR/recv3.txt"
  mosquitto_sub -h "$(host 2)" -p "$MQTT_PORT" -V "$version" -t demo/hello -q 1 -C 1 -W 15 -v > "$DIR/recv2.txt" &
  S2=$!
  mosquitto_sub -h "$(host 3)" -p "$MQTT_PORT" -V "$version" -t demo/hello -q 1 -C 1 -W 15 -v > "$DIR/recv3.txt" &
  S3=$!
  known=""
  for i in $(seq 1 40); do
    mosquitto_pub -h "$(host 1)" -p "$MQTT_PORT" -V "$version" -t demo/hello -q 1 -m "hello from n1 over $version"
    sleep 0.3
    [ -s "$DIR/recv2.txt" ] && [ -s "$DIR/recv3.txt" ] && break
    # While the subscribers still run: what n1 routes by (shown only when one of them gets nothing).
    [ "$i" = 10 ] && known=$(admin 1 subscription show 2>&1 || true)
  done
  wait "$S2" "$S3" || true
  echo "   n2 received: $(cat "$DIR/recv2.txt")"
  echo "   n3 received: $(cat "$DIR/recv3.txt")"
  if ! [ -s "$DIR/recv2.txt" ] || ! [ -s "$DIR/recv3.txt" ]; then
    echo "!! a subscriber got nothing; the subscriptions n1 knew of while they ran:" >&2
    echo "$known" >&2
    exit 1
  fi
done

echo "== retained message published on n1, read on n3; then kill -9 of n3 and restart"
mosquitto_pub -h "$(host 1)" -p "$MQTT_PORT" -t demo/status -q 1 -r -m "retained on n1"
for _ in $(seq 1 50); do admin 3 retain show topic=demo/status | grep -q "retained on n1" && break; sleep 0.2; done
echo "   on n3: $(mosquitto_sub -h "$(host 3)" -p "$MQTT_PORT" -t demo/status -C 1 -W 10 -v)"
kill -KILL "${PIDS[3]}"; wait "${PIDS[3]}" 2>/dev/null || true; PIDS[3]=""
start_node 3
echo "   n3 restarted (pid ${PIDS[3]}): $(mosquitto_sub -h "$(host 3)" -p "$MQTT_PORT" -t demo/status -C 1 -W 10 -v)"
for _ in $(seq 1 100); do
  [ "$(admin 1 cluster show --json | grep -o '"Ready": true' | wc -l)" = 3 ] && break
  sleep 0.2
done
admin 1 cluster show

echo "== a short netsplit experiment on this cluster: python -m chaos run short-partition --attach $DIR"
echo "   (clients on every node while iptables splits the cluster and heals it; the checkers judge the history)"
set +e
.venv/bin/python -m chaos run short-partition --attach "$DIR" --out "$DIR/chaos"
CHAOS_RC=$?
set -e
if [ ! -f "$DIR/chaos/history.jsonl" ]; then
  echo "!! the experiment left no history (exit code $CHAOS_RC)" >&2
  exit 1
fi

echo "== Spark convergence report of the experiment's logs: python -m spark_analytics report"
.venv/bin/python -m spark_analytics report --logs "$DIR/chaos" --history "$DIR/chaos/history.jsonl" \
  --out "$DIR/report" --master 'local[2]'
# The cluster stays up for the status page: its PIDs go to $PIDFILE for `make demo-stop`.
for i in "${NODES[@]}"; do
  kill -0 "${PIDS[$i]}" 2>/dev/null || { echo "!! node $i is no longer running; see $DIR/n$i/node.log" >&2; exit 1; }
  echo "$i ${PIDS[$i]}"
done > "$PIDFILE"
trap - EXIT
echo "== done: the cluster keeps running"
echo "   the report:      $DIR/report/report.html (open it in a browser; figures in $DIR/report/summary.json,"
echo "                    Spark's own log in $DIR/report/spark.log)"
echo "   the status page: http://$(host 1):$HTTP_PORT/status (any node's admin listener: $(host 2), $(host 3) too)"
echo "                    API key to paste into it: $(cat "$DIR/n1/data/api.key")"
echo "   stop the cluster: make demo-stop   (or: bash scripts/demo.sh stop; PIDs in $PIDFILE)"
if [ "$CHAOS_RC" != 0 ]; then
  echo "!! the netsplit experiment found a safety violation: see $DIR/chaos/verdict.json" >&2
  exit "$CHAOS_RC"
fi

#!/usr/bin/env bash
# The main job (`make demo`): start one vmqpy node on 127.0.0.1:1883 and show a subscribe/publish round trip
# with the real mosquitto clients, on MQTT 3.1.1 and 5.0, and a retained message surviving a node restart.
set -euo pipefail
cd "$(dirname "$0")/.."
VMQPY=.venv/bin/vmqpy
HOST=127.0.0.1
PORT=${DEMO_PORT:-1883}
DIR=demo-data
mkdir -p "$DIR"
rm -rf "$DIR/data"
cat > "$DIR/vmqpy.conf" <<CONF
nodename = demo@127.0.0.1
platform_data_dir = $DIR/data
listener.tcp.default = $HOST:$PORT
log.console = console
log.console.level = info
CONF

NODE_PID=""
stop_node() {
  if [ -n "$NODE_PID" ] && kill -0 "$NODE_PID" 2>/dev/null; then
    kill -TERM "$NODE_PID"
    for _ in $(seq 1 50); do kill -0 "$NODE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$NODE_PID" 2>/dev/null && kill -KILL "$NODE_PID"
  fi
  NODE_PID=""
}
trap stop_node EXIT

start_node() {
  "$VMQPY" start --config "$DIR/vmqpy.conf" 2>>"$DIR/node.log" &
  NODE_PID=$!
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then return 0; fi
    kill -0 "$NODE_PID" 2>/dev/null || { echo "the node exited; see $DIR/node.log" >&2; tail -5 "$DIR/node.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "the node did not open $HOST:$PORT within 10 s" >&2
  exit 1
}

if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
  echo "$HOST:$PORT is already in use; run with DEMO_PORT=another port" >&2
  exit 1
fi

echo "== starting vmqpy on $HOST:$PORT (log: $DIR/node.log)"
start_node
echo "   node pid $NODE_PID"

for version in mqttv311 mqttv5; do
  echo "== $version: mosquitto_sub on demo/hello, then mosquitto_pub (QoS 1)"
  mosquitto_sub -h "$HOST" -p "$PORT" -V "$version" -t demo/hello -q 1 -C 1 -W 10 -v > "$DIR/received.txt" &
  SUB=$!
  for _ in $(seq 1 50); do
    mosquitto_pub -h "$HOST" -p "$PORT" -V "$version" -t demo/hello -q 1 -m "hello from $version"
    sleep 0.2
    [ -s "$DIR/received.txt" ] && break
  done
  wait "$SUB"
  echo "   received: $(cat "$DIR/received.txt")"
done

echo "== retained message, then kill -9 and restart of the node"
mosquitto_pub -h "$HOST" -p "$PORT" -t demo/status -q 1 -r -m "retained before the crash"
kill -KILL "$NODE_PID"; wait "$NODE_PID" 2>/dev/null || true; NODE_PID=""
start_node
echo "   restarted, node pid $NODE_PID"
echo "   retained after restart: $(mosquitto_sub -h "$HOST" -p "$PORT" -t demo/status -C 1 -W 10 -v)"
stop_node
echo "== done: the node stopped cleanly"

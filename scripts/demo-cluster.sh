# scripts/demo --cluster N [--once]: a Shoal cluster of N nodes on this machine. Each node is a
# network namespace joined to a bridge by a veth pair, with its own shoald (--etcd) on its own
# address; etcd runs on the bridge's address, shoal-controller in the root namespace. Sourced by
# scripts/demo after lib.sh; needs root (namespaces).
NODES="$1"
ONCE="$2"
STATE="${SHOAL_STATE_DIR:-/tmp/shoal-demo-cluster}"
NET="10.78.0"
BR=shoal-demo-br
CTL_PORT="${SHOAL_CONTROLLER_PORT:-8090}"
CTL="http://127.0.0.1:$CTL_PORT"
case "$NODES" in '' | *[!0-9]*) echo "scripts/demo --cluster N: N must be a number of nodes (1 to 9)"; exit 2 ;; esac
[ "$NODES" -ge 1 ] && [ "$NODES" -le 9 ] || { echo "scripts/demo --cluster N: N must be 1 to 9"; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "scripts/demo --cluster needs root (network namespaces)"; exit 1; }

install_packages
build
ensure_bpffs
BIN="$BUILD/bin"
PIDS=()
cluster_down() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  for i in $(seq 0 $((NODES - 1))); do
    ip link del "shd$i" 2>/dev/null || true
    ip netns del "shoal-demo-n$i" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
}
demo_exit() {
  cluster_down
  # The node the demo kills with -9 cannot unlink its pool; the others have by now.
  for i in $(seq 0 $((NODES - 1))); do rm -f "/dev/shm/shoal.node-$i."* 2>/dev/null || true; done
}
trap demo_exit EXIT
cluster_down  # what a previous run left
rm -rf "$STATE"
mkdir -p "$STATE"

step "Network: bridge $BR ($NET.254/24) and $NODES node namespace(s) on veth pairs"
ip link add "$BR" type bridge
ip addr add "$NET.254/24" dev "$BR"
ip link set "$BR" up
for i in $(seq 0 $((NODES - 1))); do
  ns="shoal-demo-n$i"
  ip netns add "$ns"
  ip link add "shd$i" type veth peer name "shd${i}p"
  ip link set "shd${i}p" netns "$ns"
  ip netns exec "$ns" ip link set "shd${i}p" name eth0
  ip netns exec "$ns" ip addr add "$NET.$((i + 1))/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip link set lo up
  ip link set "shd$i" master "$BR"
  ip link set "shd$i" up
  echo "  node-$i: namespace $ns, $NET.$((i + 1))"
done

step "etcd on $NET.254:2379 (log $STATE/etcd.log)"
etcd --name demo --data-dir "$STATE/etcd" --listen-client-urls "http://$NET.254:2379" \
  --advertise-client-urls "http://$NET.254:2379" --listen-peer-urls "http://$NET.254:2380" \
  --initial-advertise-peer-urls "http://$NET.254:2380" --initial-cluster "demo=http://$NET.254:2380" \
  >"$STATE/etcd.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do curl -fsS "http://$NET.254:2379/health" >/dev/null 2>&1 && break; sleep 0.1; done
curl -s "http://$NET.254:2379/health"; echo

step "shoal-controller on $CTL (log $STATE/controller.log)"
"$BIN/shoal-controller" --etcd "http://$NET.254:2379" --cluster demo --port "$CTL_PORT" \
  --state-dir "$STATE/controller" --name controller-0 >"$STATE/controller.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do curl -fsS "$CTL/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
TOKEN=$(sed -n 's/^token: //p' "$STATE/controller/admin.conf")
api() { curl -sS -H "Authorization: Bearer $TOKEN" "$@"; }

for i in $(seq 0 $((NODES - 1))); do
  mkdir -p "$STATE/node-$i"
  cat >"$STATE/node-$i/shoald.yaml" <<YAML
node_name: node-$i
listen_host: $NET.$((i + 1))
listen_port: 8080
control_listen_host: 127.0.0.1
state_dir: $STATE/node-$i/state
pool: boost
pool_bytes: 268435456
max_body_bytes: 67108864
etcd: http://$NET.254:2379
cluster: demo
node_lease_ttl_s: 5
YAML
  # nsenter --net: the node's network only (ip netns exec would also hide /sys/fs/bpf).
  nsenter --net="/var/run/netns/shoal-demo-n$i" "$BIN/shoald" -c "$STATE/node-$i/shoald.yaml" \
    >"$STATE/node-$i/shoald.log" 2>&1 &
  PIDS+=($!)
done
step "Starting $NODES shoald(s), one per namespace, each joining the cluster in etcd"
for i in $(seq 0 $((NODES - 1))); do
  for _ in $(seq 1 150); do curl -fsS "http://$NET.$((i + 1)):8080/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  grep -m1 "cluster: node node-$i of cluster" "$STATE/node-$i/shoald.log" || {
    cat "$STATE/node-$i/shoald.log"; echo "node-$i did not join"; exit 1; }
done

show_nodes() {
  echo "\$ shoal --server $CTL get nodes -o wide"
  SHOAL_TOKEN="$TOKEN" "$BIN/shoal" --server "$CTL" get nodes -o wide
}
show_placements() {
  api "$CTL/v1/functions" | "$VENV/bin/python" -c '
import json, sys
for f in json.load(sys.stdin)["functions"]:
    print("  %-10s id %d generation %d: %s" % (f["name"], f["id"], f["generation"],
          ", ".join("%s (max %d)" % (p["node"], p["max"]) for p in f["placements"]) or "-"))'
}
for _ in $(seq 1 50); do [ "$(api "$CTL/v1/cluster" | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["nodes"])')" = "$NODES" ] && break; sleep 0.1; done
step "shoal get nodes (the controller's /v1/nodes)"
show_nodes

step "Deploying deploy/examples/echo.yaml and sha256.yaml through the controller"
for f in echo sha256; do
  echo "\$ curl -X POST $CTL/v1/functions --data-binary @deploy/examples/$f.yaml"
  api -X POST -H 'Content-Type: application/yaml' --data-binary @"$ROOT/deploy/examples/$f.yaml" "$CTL/v1/functions"
done
sleep 1
show_placements

# invoke_until_ok I FUNCTION BODY: POSTs BODY to /fn/FUNCTION on node I's gateway until it
# answers 200 (50 tries, 0.2 s apart); leaves the last answer and its status in $out.
invoke_until_ok() {
  for _ in $(seq 1 50); do
    out=$(curl -s -w ' [%{http_code}]' -d "$3" "http://$NET.$(($1 + 1)):8080/fn/$2")
    case "$out" in *"[200]") return 0 ;; esac
    sleep 0.2
  done
}

step "Invoking echo through each node's gateway"
for i in $(seq 0 $((NODES - 1))); do
  invoke_until_ok "$i" echo "hello from node-$i's gateway"
  echo "  $NET.$((i + 1)): $out"
done

if [ "$NODES" -ge 2 ]; then
  step "Forwarding: 'pinned' runs on one node only (scale max 1); every gateway answers it"
  printf 'apiVersion: shoal.dev/v1\nkind: Function\nmetadata:\n  name: pinned\nspec:\n  handler:\n    builtin: echo\n  scale: {min: 1, max: 1}\n' |
    api -X POST -H 'Content-Type: application/yaml' --data-binary @- "$CTL/v1/functions"
  sleep 1
  show_placements
  for i in $(seq 0 $((NODES - 1))); do
    invoke_until_ok "$i" pinned "entered node-$i"
    fwd=$(curl -s "http://$NET.$((i + 1)):8080/metrics" | sed -n 's/^shoal_forwards_total{function="pinned",node="\([^"]*\)",result="ok"} \(.*\)/forwarded to \1: \2/p')
    echo "  $NET.$((i + 1)): $out   ${fwd:-served here}"
  done
  step "FL across gateways: a FedAvg job deployed through the controller, its clients spread over the other nodes' gateways"
  echo "\$ curl -X POST $CTL/v1/functions --data-binary @fljob-digits.yaml   (the controller picks the job's top)"
  printf 'apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata:\n  name: digits\nspec:\n  algorithm: {name: fedavg}\n  model: {architecture: mlp, hidden: 64, seed: 1}\n  data: {dataset: digits}\n  clients: {expected: %d}\n  stop: {rounds: 60, accuracy: 0.95}\n  training: {localSteps: 40, learningRate: 0.1, batchSize: 32}\n' \
    "$((2 * (NODES - 1)))" |
    api -X POST -H 'Content-Type: application/yaml' --data-binary @- "$CTL/v1/functions"
  # The clients' token is the cluster's (issued by the controller, accepted on every node).
  FL_TOKEN=$(api -X POST -H 'Content-Type: application/json' -d '{"role": "fl-client", "job": "digits"}' \
    "$CTL/v1/tokens" |
    "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  for _ in $(seq 1 50); do
    curl -fsS -H "Authorization: Bearer $FL_TOKEN" "http://$NET.2:8080/v1/jobs/digits" >/dev/null 2>&1 && break
    sleep 0.2
  done
  CLIENTS=()
  for i in $(seq 1 $((NODES - 1))); do
    echo "\$ shoal-client --server http://$NET.$((i + 1)):8080 --job digits --clients 2 --data digits &"
    SHOAL_TOKEN="$FL_TOKEN" "$BIN/shoal-client" --server "http://$NET.$((i + 1)):8080" --job digits \
      --clients 2 --data digits --partition iid --seed "$i" --time-scale 0 --max-seconds 60 \
      >"$STATE/client-$i.log" 2>&1 &
    CLIENTS+=($!)
  done
  FL_OK=1
  for i in $(seq 1 $((NODES - 1))); do
    wait "${CLIENTS[$((i - 1))]}" || FL_OK=0
    echo "  clients via node-$i: $(grep -m1 'job done' "$STATE/client-$i.log" || tail -1 "$STATE/client-$i.log")"
  done
  curl -sS -H "Authorization: Bearer $FL_TOKEN" "http://$NET.2:8080/v1/jobs/digits" | "$VENV/bin/python" -c '
import json, sys
j = json.load(sys.stdin)
acc = [v["accuracy"] for v in j.get("versions", []) if isinstance(v.get("accuracy"), (int, float))]
print("  job digits on its top: %s at version %s, accuracy %s" % (j.get("state"), j.get("version"), acc[-1] if acc else "-"))
for node, f in sorted(j.get("folded_elsewhere", {}).items()):
    print("  %s folded %d update(s) there and sent the top %d partial sum(s) (%.1f MB), never the updates" % (node, f["updates"], f["partial_sums"], f["partial_sum_bytes"] / 1e6))'
  for i in $(seq 1 $((NODES - 1))); do
    echo "  node-$i forwarded: $(curl -s "http://$NET.$((i + 1)):8080/metrics" | sed -n 's/^shoal_forwards_total{function="fl.digits",node="node-0",result="ok"} //p') control request(s) of the job (join, task, model) to node-0"
  done
  echo "\$ shoal --server $CTL fl status digits   (the top's state as etcd holds it)"
  SHOAL_TOKEN="$TOKEN" "$BIN/shoal" --server "$CTL" fl status digits | sed -n '1,8p' | sed 's/^/  /'
  [ "$FL_OK" = 1 ] || { echo "an FL client process failed: see $STATE/client-*.log"; exit 1; }

  LAST=$((NODES - 1))
  step "Node loss: kill -9 node-$LAST; its share of each function moves once its lease (5 s) ends"
  kill -9 "${PIDS[$((LAST + 2))]}"
  T0=$(date +%s.%N)
  for _ in $(seq 1 150); do
    [ "$(api "$CTL/v1/cluster" | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["nodes"])')" = "$LAST" ] && break
    sleep 0.1
  done
  printf '  node-%s left the cluster %.1f s after the kill\n' "$LAST" "$(echo "$(date +%s.%N) - $T0" | bc)"
  sleep 1
  show_nodes
  show_placements
fi
if [ "$ONCE" = 1 ]; then
  step "Done (--once): stopping the cluster"
  exit 0
fi
step "The cluster keeps running (Ctrl-C to stop): controller $CTL (token in $STATE/controller/admin.conf)"
wait "${PIDS[1]}"

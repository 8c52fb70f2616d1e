# scripts/demo --lm [--once]: the language-model variant on one node. Three PyTorch clients
# (tools/lm/fl_lora.py) fine-tune LoRA adapters of shoal-gpt federatedly (an FLJob with
# spec.model.lora, FedIT) while an lm function serves the base with the job's newest adapter
# hot-swapped in; a streamed OpenAI completion is printed from each version as it commits.
# Bounded: 3 rounds of 10 local steps on a few pages each (2 rounds took 136 s on 2 loaded cores).
# Sourced by scripts/demo after lib.sh. --once: exit 1 naming the cause when the job does not
# finish its rounds or a version's completion fails.
ONCE="$1"
PORT="${SHOAL_PORT:-8080}"
CONTROL_PORT="${SHOAL_CONTROL_PORT:-8081}"
STATE="${SHOAL_STATE_DIR:-/tmp/shoal-demo-lm}"
SERVER="http://127.0.0.1:$PORT"
ROUNDS="${SHOAL_LM_ROUNDS:-3}"
DEADLINE_S="${SHOAL_LM_SECONDS:-360}"

if [ "${SHOAL_DEMO_PREBUILT:-0}" = 1 ]; then
  # The test of this demo (tests/integration/demo_lm_test.py): the set-up already ran (the same
  # commands as below, with nothing missing they only check), the binaries are the build's.
  BIN="${SHOAL_BIN_DIR:?SHOAL_DEMO_PREBUILT needs SHOAL_BIN_DIR}"
  [ -f "$(lm_dir)/model.safetensors" ] || { echo "shoal-gpt base model not built ($(lm_dir))"; exit 1; }
else
  install_packages
  install_python test
  lm_base_model
  build
  BIN="$BUILD/bin"
fi
ensure_bpffs
export SHOAL_CONFIG="$STATE/admin.conf"
SHOAL=("$BIN/shoal")
BASE="$(lm_dir)/model.safetensors"

step "Starting shoald --standalone on :$PORT (state and logs in $STATE)"
rm -rf "$STATE"
mkdir -p "$STATE"
# The instance's sandbox reads the base from a path of its own (the cache dir is private).
cp "$BASE" "$STATE/shoal-gpt.safetensors"
chmod 0644 "$STATE/shoal-gpt.safetensors"
BASE="$STATE/shoal-gpt.safetensors"
"$BIN/shoald" --standalone --port "$PORT" --control-port "$CONTROL_PORT" --state-dir "$STATE" \
  --node-name demo-lm >"$STATE/shoald.log" 2>&1 &
SHOALD=$!
CLIENTS=()
cleanup() {
  for p in "${CLIENTS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  kill -TERM "$SHOALD" 2>/dev/null || true
  wait "$SHOALD" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  curl -fsS "$SERVER/readyz" >/dev/null 2>&1 && break
  kill -0 "$SHOALD" 2>/dev/null || { cat "$STATE/shoald.log"; echo "shoald exited"; exit 1; }
  sleep 0.1
done

step "An FL job over LoRA adapters of shoal-gpt, and the lm function that follows it"
cat >"$STATE/lm.yaml" <<YAML
apiVersion: shoal.dev/v1
kind: FLJob
metadata: {name: lora}
spec:
  algorithm: {name: fedavg}
  model:
    lora: {base: $BASE, rank: 4, alpha: 8}
  clients: {expected: 3}
  stop: {rounds: $ROUNDS}
  training: {localSteps: 10, learningRate: 0.003, batchSize: 8}
  aggregation:
    lora: {method: fedit}
---
apiVersion: shoal.dev/v1
kind: Function
metadata: {name: lm}
spec:
  handler: inference
  concurrency: 8
  scale: {min: 1, max: 1}
  inference:
    threads: 1
    source:
      lm:
        base: $BASE
        adapters:
          - {name: ft, flJob: lora}
YAML
sed 's/^/  /' "$STATE/lm.yaml"
echo "\$ shoal deploy -f lm.yaml"
"${SHOAL[@]}" deploy -f "$STATE/lm.yaml"
TOKEN=$("${SHOAL[@]}" token create --role fl-client --job lora --name demo-lm)
for _ in $(seq 1 300); do
  curl -fsS "$SERVER/fn/lm/v1/models" 2>/dev/null | grep -q '"lm:ft"' && break
  sleep 0.2
done
echo "\$ curl -s $SERVER/fn/lm/v1/models"
curl -s "$SERVER/fn/lm/v1/models"

# A streamed completion (stream: true, server-sent events) with the job's adapter, printed piece
# by piece as it arrives; the last line names the adapter version that answered. Sampled with a
# fixed seed: the same text for the same weights, so what changes between versions is the adapter.
complete() {
  curl -sN "$SERVER/fn/lm/v1/completions" -H 'Content-Type: application/json' -d '{"model":
    "lm:ft", "prompt": "The read() system call", "max_tokens": 48, "temperature": 0.8, "seed": 7, "stream": true,
    "stream_options": {"include_usage": true}}' |
    "$VENV/bin/python" -u -c '
import json, sys
fp, usage, text = "", None, 0
for line in sys.stdin:
    if not line.startswith("data: {"):
        continue
    e = json.loads(line[6:])
    fp = e.get("system_fingerprint") or fp
    usage = e.get("usage") or usage
    for c in e.get("choices", []):
        sys.stdout.write(c.get("text", "")); sys.stdout.flush(); text += 1
print()
if not usage or not text:
    sys.exit("no streamed answer")
print("  [%s; %d prompt + %d completion tokens, %d pieces]"
      % (fp, usage["prompt_tokens"], usage["completion_tokens"], text))
'
}

FAILURES=()
step "Version 0 (LoRA's initialisation: the base model itself), streamed"
echo "\$ curl -sN $SERVER/fn/lm/v1/completions -d '{\"model\": \"lm:ft\", \"prompt\": \"The read() system call\", \"stream\": true, ...}'"
complete || FAILURES+=("version 0: the streamed completion failed")

step "Fine-tuning: 3 clients (tools/lm/fl_lora.py), each on its own pages of manpages-dev"
for k in 0 1 2; do
  echo "\$ python -m tools.lm.fl_lora --job lora --client-index $k --num-clients 3 --max-pages 45 &"
  (cd "$ROOT" && SHOAL_TOKEN="$TOKEN" "$VENV/bin/python" -m tools.lm.fl_lora --server "$SERVER" \
    --job lora --token "$TOKEN" --base "$BASE" --client-index "$k" --num-clients 3 \
    --max-pages 45 --max-seconds "$DEADLINE_S" >"$STATE/client-$k.log" 2>&1) &
  CLIENTS+=($!)
done

step "Serving each new version as it commits (the adapter is hot-swapped between decode steps)"
SEEN=0
START=$SECONDS
while [ $((SECONDS - START)) -lt "$DEADLINE_S" ]; do
  STATUS=$(curl -fsS -H "Authorization: Bearer $TOKEN" "$SERVER/v1/jobs/lora" 2>/dev/null || echo '{}')
  VERSION=$(printf '%s' "$STATUS" | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin).get("version", 0))')
  STATE_NOW=$(printf '%s' "$STATUS" | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin).get("state", "?"))')
  if [ "$VERSION" -gt "$SEEN" ]; then
    # shoald tells the function of each commit (a kJobCommitted notice) and it downloads the
    # version: wait until it serves this one.
    for _ in $(seq 1 50); do
      curl -fsS "$SERVER/fn/lm/v1/models" | grep -q "\"version\":$VERSION" && break
      sleep 0.1
    done
    echo "--- version $VERSION committed ($((SECONDS - START)) s; job $STATE_NOW):"
    complete || FAILURES+=("version $VERSION: the streamed completion failed")
    SEEN=$VERSION
  fi
  [ "$STATE_NOW" = done ] && [ "$SEEN" -ge "$VERSION" ] && break
  sleep 0.5
done
for p in "${CLIENTS[@]}"; do wait "$p" 2>/dev/null || true; done
CLIENTS=()
echo "(each client's held-out perplexity per version, from $STATE/client-*.log:)"
for k in 0 1 2; do tail -n 1 "$STATE/client-$k.log" | cut -c1-200 | sed "s/^/  /"; done
echo "\$ shoal fl status lora"
"${SHOAL[@]}" fl status lora
echo "\$ curl -s $SERVER/fn/lm/stats"
curl -s "$SERVER/fn/lm/stats"
[ "$SEEN" -ge "$ROUNDS" ] || FAILURES+=("the job committed $SEEN of $ROUNDS versions in ${DEADLINE_S} s (see $STATE/client-*.log)")

if [ ${#FAILURES[@]} -gt 0 ]; then
  step "FAILED"
  printf '  %s\n' "${FAILURES[@]}"
  [ "$ONCE" = 1 ] && exit 1
fi
if [ "$ONCE" = 1 ]; then
  step "Done (--once): stopping shoald"
  exit 0
fi
step "shoald keeps running at $SERVER (Ctrl-C to stop). Try the OpenAI client: base_url=$SERVER/fn/lm/v1, model lm:ft"
wait "$SHOALD"

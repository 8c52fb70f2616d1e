# Shared by scripts/demo and scripts/test: install what is missing, then configure and build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${SHOAL_BUILD_DIR:-$ROOT/build}"
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev linux-libc-dev
  libboost-dev libuv1-dev libhttp-parser-dev protobuf-compiler libprotobuf-dev
  prometheus-cpp-dev libspdlog-dev libfmt-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libssl-dev libcpp-httplib-dev libcurl4-openssl-dev libseccomp-dev libcap-dev libgtest-dev libgmock-dev curl wrk nginx-light
  libonnx-dev libdnnl-dev
  python3 python3-numpy python3-sklearn dataset-fashion-mnist iproute2 procps
  # the Python SDK's tests (client/python/tests, tests/integration/python_sdk_test.py)
  python3-pytest
  # onnx_test's checker; libFuzzer's runtime for the documented -DSHOAL_FUZZ=ON clang build
  python3-onnx libclang-rt-14-dev
  # the benchmarks' anchors: OpenBLAS (numpy, torch and bench-fold's saxpy use it), torch
  libopenblas0-pthread python3-torch
  # the DPDK pool backend (pool: dpdk|auto): rte_ring's headers and librte_ring
  libdpdk-dev
  # cluster mode keeps its state in etcd; the cluster tests and `scripts/demo --cluster` run it
  etcd-server
  # deploy/k8s: `kubectl kustomize` renders it, tests/k8s validates it with node (npm ci there),
  # capsh starts shoald with the DaemonSet's capability set; scripts/image builds the OCI image
  kubernetes-client nodejs npm libcap2-bin mmdebstrap buildah
  # deploy/grafana's test: pytest runs it; a real Prometheus runs every query of the dashboard
  # against live shoalds
  python3-pytest prometheus
  # the web console (/ui): Chart.js compiled into shoald; its test drives Debian's headless
  # Chromium over the DevTools Protocol
  libjs-chart.js chromium python3-websocket
)
# A package whose command is already on PATH from another source (kubectl from Google's
# repository, node and npm from NodeSource) is not installed again: it would conflict.
declare -A PACKAGE_COMMAND=([kubernetes-client]=kubectl [nodejs]=node [npm]=npm)

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    if [ -n "${PACKAGE_COMMAND[$p]:-}" ] && command -v "${PACKAGE_COMMAND[$p]}" >/dev/null; then
      continue
    fi
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    step "Debian packages: all ${#PACKAGES[@]} present"
    return
  fi
  step "Installing ${#missing[@]} Debian package(s): ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "scripts need root to install packages (apt-get)"; exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  # nginx-light starts a service on install in some images; the benchmarks start their own.
  (systemctl stop nginx 2>/dev/null || service nginx stop 2>/dev/null || true) >/dev/null 2>&1
  # So does etcd-server; Shoal's tests and demo start their own etcd on their own ports.
  (systemctl disable --now etcd 2>/dev/null || service etcd stop 2>/dev/null || true) >/dev/null 2>&1
  # And prometheus: the Grafana dashboard's test starts its own, scraping its own shoalds.
  (systemctl disable --now prometheus 2>/dev/null || service prometheus stop 2>/dev/null || true) >/dev/null 2>&1
}

# tests/k8s's node modules (kubernetes-models, yaml) from its package-lock.json: from npm's
# cache when it has them, else from the registry now, at set-up time; never at test time.
install_node_modules() {
  local dir="$ROOT/tests/k8s"
  if [ -d "$dir/node_modules/kubernetes-models" ] && [ -d "$dir/node_modules/yaml" ]; then
    step "tests/k8s node modules: present"
    return
  fi
  step "tests/k8s node modules: npm ci"
  (cd "$dir" && { npm ci --offline --no-audit --no-fund >/dev/null 2>&1 || npm ci --no-audit --no-fund; }) ||
    echo "tests/k8s: npm ci failed: the k8s validation test will be skipped, naming it"
}

# The OCI image (scripts/image) for tests/k8s's k8s_image, built at set-up time because it
# downloads Debian packages; where it cannot be built, the reason goes to
# $BUILD/shoal-image.skipped and k8s_image skips naming it. SHOAL_IMAGE=0 leaves it out.
build_image() {
  [ "${SHOAL_IMAGE:-1}" != 0 ] || { rm -f "$BUILD/shoal-image.oci.tar"; echo "SHOAL_IMAGE=0: no image" > "$BUILD/shoal-image.skipped"; return 0; }
  step "OCI image (scripts/image)"
  local out rc=0
  out="$("$ROOT/scripts/image" "$BUILD/shoal-image.oci.tar" 2>&1)" || rc=$?
  echo "$out" | tail -3
  if [ "$rc" -ne 0 ]; then
    rm -f "$BUILD/shoal-image.oci.tar"
    echo "scripts/image exited $rc: $(echo "$out" | tail -1)" > "$BUILD/shoal-image.skipped"
  else
    rm -f "$BUILD/shoal-image.skipped"
  fi
}

build() {
  step "Configuring $BUILD (Release, Ninja, ccache)"
  export CCACHE_DIR="${CCACHE_DIR:-$ROOT/.cache/ccache}"
  # SHOAL_WITH_CUDA=AUTO: the CUDA parts (GPU fold, CUDA executor, their tests) are compiled
  # when nvcc is found (PATH or /usr/local/cuda/bin), for sm_90 only to keep nvcc's time small.
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  step "Building ($(nproc) jobs)"
  cmake --build "$BUILD" -j "$(nproc)"
}

# The DPDK pool backend's 2 MiB hugepages (SHOAL_HUGEPAGES, default 768: the pool tests, two
# 512 MiB tenant pools of the dpdk integration suites). Raised, never lowered, and the count
# found is kept in HUGEPAGES_BEFORE so scripts/test can give them back; says what it did.
HUGEPAGES_SYSFS=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
reserve_hugepages() {
  local want="${SHOAL_HUGEPAGES:-768}"
  HUGEPAGES_BEFORE="$(cat "$HUGEPAGES_SYSFS" 2>/dev/null || echo none)"
  if [ "$HUGEPAGES_BEFORE" = none ]; then
    echo "hugepages: $HUGEPAGES_SYSFS missing: the dpdk pool backend is skipped"
    return 0
  fi
  if [ "$HUGEPAGES_BEFORE" -lt "$want" ]; then
    echo "$want" > "$HUGEPAGES_SYSFS" 2>/dev/null || true
  fi
  echo "hugepages: $(cat "$HUGEPAGES_SYSFS") x 2 MiB reserved (asked $want, found $HUGEPAGES_BEFORE)"
}
release_hugepages() {
  if [ "${HUGEPAGES_BEFORE:-none}" != none ]; then
    echo "$HUGEPAGES_BEFORE" > "$HUGEPAGES_SYSFS" 2>/dev/null || true
    echo "hugepages: back to $(cat "$HUGEPAGES_SYSFS")"
  fi
}

ensure_bpffs() {
  if [ "$(id -u)" -eq 0 ] && ! mountpoint -q /sys/fs/bpf; then
    mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
  fi
}

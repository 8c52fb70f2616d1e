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
  libonnx-dev
  # (oneDNN is not Debian's 2.6: its 3.2 comes from PyPI wheels into the venv, see test.in)
  # Debian's CPython 3.11 makes the project venv (.venv: numpy, pytest, torch, onnx, ... pinned
  # in requirements/*.lock, see install_python); python3-sklearn only for the 8x8 digits file
  # (clients and tests read its digits.csv.gz); the Fashion-MNIST files
  python3.11 python3-venv python3-sklearn dataset-fashion-mnist iproute2 procps
  # libFuzzer's runtime for the documented -DSHOAL_FUZZ=ON clang build
  libclang-rt-14-dev
  # scripts/format-check and scripts/tidy (scripts/test runs the first, the second with
  # SHOAL_TEST_TIDY=1): one pinned LLVM version, since another clang-format lays code out
  # differently and another clang-tidy has other checks
  clang-format-16 clang-tidy-16
  # bench-fold's saxpy anchor: Debian's OpenBLAS
  libopenblas0-pthread
  # the DPDK pool backend (pool: dpdk|auto): rte_ring's headers and librte_ring
  libdpdk-dev
  # cluster mode keeps its state in etcd; the cluster tests and `scripts/demo --cluster` run it
  etcd-server
  # deploy/k8s: `kubectl kustomize` renders it, tests/k8s validates it with node (npm ci there),
  # capsh starts shoald with the DaemonSet's capability set; scripts/image builds the OCI image
  kubernetes-client nodejs npm libcap2-bin mmdebstrap buildah
  # deploy/grafana's test: a real Prometheus runs every query of the dashboard against live
  # shoalds
  prometheus
  # the web console (/ui): Chart.js compiled into shoald; its test drives Debian's headless
  # Chromium over the DevTools Protocol
  libjs-chart.js chromium
  # the shoal-gpt language model's English text (tools/lm/corpus.py): the Linux man-pages
  # project's pages, plain prose with little markup, ~2 MB in sections 1/4/5/7/8 (pretraining)
  # and ~13 MB in 2/3 (federated LoRA fine-tuning: another domain, split by topic per client)
  manpages manpages-dev
)
# A package whose command is already on PATH from another source (kubectl from Google's
# repository, node and npm from NodeSource) is not installed again: it would conflict.
declare -A PACKAGE_COMMAND=([kubernetes-client]=kubectl [nodejs]=node [npm]=npm)

# Caches kept outside the clone, so a machine's second run (CI clones afresh every time) reuses
# them: ccache's objects, uv's wheels and the installer itself.
SHOAL_CACHE="${SHOAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal}"
export CCACHE_DIR="${CCACHE_DIR:-$SHOAL_CACHE/ccache}"
# Paths under the clone are hashed relative to it, so another clone's objects are hits.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
export UV_CACHE_DIR="${UV_CACHE_DIR:-$SHOAL_CACHE/uv}"
# The project's Python: a venv made from Debian's CPython 3.11 (not whichever python3 is first
# on PATH), with every package pinned by hash in requirements/*.lock.
VENV="$ROOT/.venv"
SHOAL_BASE_PYTHON="${SHOAL_BASE_PYTHON:-/usr/bin/python3.11}"

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

# Installs requirements/<name>.lock into .venv (made first if missing) with uv, itself installed
# from requirements/tools.lock into the shared cache. Idempotent: a stamp in the venv records the
# lock's hash, so an unchanged lock costs nothing; a changed one is synced (packages not in the
# lock are left alone, so test.lock then bench.lock both stay installed).
# uv (requirements/tools.lock) in a small venv of its own under the shared cache; prints its path.
ensure_uv() {
  local tools="$SHOAL_CACHE/tools/uv"
  if [ ! -x "$tools/bin/uv" ] || ! cmp -s "$ROOT/requirements/tools.lock" "$tools/tools.lock"; then
    step "Installing uv into $tools (requirements/tools.lock)" >&2
    rm -rf "$tools"
    "$SHOAL_BASE_PYTHON" -m venv "$tools" >&2
    "$tools/bin/pip" install --quiet --require-hashes -r "$ROOT/requirements/tools.lock" >&2
    cp "$ROOT/requirements/tools.lock" "$tools/tools.lock"
  fi
  echo "$tools/bin/uv"
}

install_python() {
  local name="$1" lock="$ROOT/requirements/$1.lock"
  local want have stamp="$VENV/.shoal-$1.sha256"
  want="$(sha256sum "$lock" | cut -d' ' -f1)"
  have="$(cat "$stamp" 2>/dev/null || true)"
  if [ -x "$VENV/bin/python" ] && [ "$want" = "$have" ]; then
    step "Python venv: $name.lock installed ($(grep -c '==' "$lock") packages, .venv)"
    install_python_sdk
    return
  fi
  if [ ! -x "$SHOAL_BASE_PYTHON" ]; then
    echo "Python venv: $SHOAL_BASE_PYTHON missing (Debian's python3.11); set SHOAL_BASE_PYTHON"
    exit 1
  fi
  local uv
  uv="$(ensure_uv)"
  if [ ! -x "$VENV/bin/python" ]; then
    step "Making the project venv (.venv, from $SHOAL_BASE_PYTHON)"
    "$uv" venv --quiet --python "$SHOAL_BASE_PYTHON" "$VENV"
  fi
  step "Python venv: installing requirements/$name.lock ($(grep -c '==' "$lock") packages; wheels cached in $UV_CACHE_DIR)"
  VIRTUAL_ENV="$VENV" "$uv" pip install --python "$VENV/bin/python" --require-hashes --no-deps \
    --link-mode "${UV_LINK_MODE:-hardlink}" -r "$lock"
  echo "$want" > "$stamp"
  install_python_sdk
}

# The Python SDK (shoal/fl/sdk/python, shoal_fl) as the wheel its pyproject.toml builds, installed into
# .venv: every test and example imports it from there. Built offline by uv with the venv's own
# flit-core (test.lock; --no-build-isolation: no build environment is downloaded), and rebuilt
# when a file of the SDK's package or its pyproject.toml changes.
install_python_sdk() {
  local sdk="$ROOT/shoal/fl/sdk/python" stamp="$VENV/.shoal-sdk.sha256" want dist uv
  want="$(cd "$sdk" && find pyproject.toml README.md shoal_fl -name __pycache__ -prune -o \
          -type f -print | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)"
  if [ "$want" = "$(cat "$stamp" 2>/dev/null || true)" ]; then
    step "Python SDK: shoal_fl $(cd "$sdk" && sed -n 's/^__version__ = "\(.*\)"/\1/p' shoal_fl/__init__.py) installed in .venv"
    return
  fi
  uv="$(ensure_uv)"
  dist="$(mktemp -d)"
  step "Python SDK: building shoal/fl/sdk/python's wheel and installing it into .venv"
  "$uv" build --offline --quiet --wheel --no-build-isolation \
    --python "$VENV/bin/python" --out-dir "$dist" "$sdk"
  "$uv" pip install --offline --quiet --no-deps --reinstall \
    --python "$VENV/bin/python" "$dist"/shoal_fl-*.whl
  rm -rf "$dist"
  echo "$want" > "$stamp"
}

# Where the CUDA Toolkit's nvcc comes from: /usr/local/cuda where one is installed, else NVIDIA's
# wheels in the venv (test.lock: nvcc, runtime, cuBLAS, cuDNN, CCCL at CUDA 13.2). The wheels
# ship versioned libraries only (libcudart.so.13), so .venv/cuda is laid out as a toolkit whose
# lib64/ adds the unversioned names CMake's FindCUDAToolkit links. Leaves CMake's arguments in
# CUDA_ARGS and says which nvcc it chose.
cuda_toolkit_args() {
  CUDA_ARGS=()
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "CUDA: nvcc from /usr/local/cuda ($(/usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*'))"
    return
  fi
  local site="$VENV/lib/python3.11/site-packages/nvidia" tk="$VENV/cuda" f
  if [ ! -x "$site/cu13/bin/nvcc" ]; then
    echo "CUDA: no nvcc (neither /usr/local/cuda nor the venv's NVIDIA wheels): CUDA parts off"
    return
  fi
  rm -rf "$tk" && mkdir -p "$tk/lib64"
  for f in bin include nvvm; do ln -s "$site/cu13/$f" "$tk/$f"; done
  ln -s lib64 "$tk/lib"
  for f in "$site"/cu13/lib/* "$site"/cudnn/lib/*; do
    ln -s "$f" "$tk/lib64/"
    case "$f" in *.so.*) ln -sf "$f" "$tk/lib64/$(basename "${f%%.so.*}").so" ;; esac
  done
  echo "CUDA: nvcc from NVIDIA's wheels in .venv ($("$tk/bin/nvcc" --version | grep -o 'release [0-9.]*'), toolkit laid out in $tk)"
  CUDA_ARGS=(-DCMAKE_CUDA_COMPILER="$tk/bin/nvcc" -DCUDAToolkit_ROOT="$tk"
             -DSHOAL_CUDNN_ROOT="$site/cudnn")
}

# The shoal-gpt base model (tools/lm, docs/reference/lm-format.md): pretrained once per machine
# by tools/lm/pretrain.py on Debian's manpages (deterministic, a fixed number of steps: a few
# minutes on 2 cores), cached outside the clone under $SHOAL_CACHE/lm/<key>, the key a hash of
# tools/lm's model, corpus and pretraining code and of the manpages package's version, so later
# runs (and fresh clones) take 0 s. `scripts/lm-path` prints the model's path. SHOAL_LM=0
# skips it (the bench and tutorial that need it say so).
lm_key() {
  { cat "$ROOT/tools/lm/model.py" "$ROOT/tools/lm/corpus.py" "$ROOT/tools/lm/pretrain.py"
    dpkg-query -W -f='${Package} ${Version}\n' manpages 2>/dev/null || echo "manpages missing"
  } | sha256sum | cut -c1-16
}
lm_dir() { echo "$SHOAL_CACHE/lm/$(lm_key)"; }
lm_base_model() {
  local dir
  dir="$(lm_dir)"
  if [ "${SHOAL_LM:-1}" = 0 ]; then
    step "shoal-gpt base model: skipped (SHOAL_LM=0)"; return 0
  fi
  if [ -f "$dir/model.safetensors" ]; then
    step "shoal-gpt base model: cached in $dir ($(sed -n 's/.*"heldout_ppl_per_byte": \(.*\),/\1/p' "$dir/report.json") held-out perplexity per byte)"
    return 0
  fi
  step "shoal-gpt base model: pretraining on Debian's manpages into $dir (once per machine: a few minutes)"
  mkdir -p "$SHOAL_CACHE/lm"
  # One pretraining at a time per machine (a second set-up waits, then finds the cache).
  (
    flock 9
    [ -f "$dir/model.safetensors" ] && exit 0
    cd "$ROOT" && PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" -m tools.lm.pretrain --out "$dir"
  ) 9>"$SHOAL_CACHE/lm/.lock"
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

# tests/k8s's real Kubernetes API server and kubectl, built from Kubernetes' Go modules at the
# release tools/kube-apiserver/go.mod pins (its go.sum holds every module's hash) into
# $SHOAL_CACHE/tools/kube-apiserver-<version>/, with the Go module and build caches under
# $SHOAL_CACHE/go, so a fresh clone reuses both: cold about 40 min on 2 busy cores, then seconds.
# Where Go is missing or the build fails, the reason goes to <dir>.skipped and the tests that
# need the API server skip naming it. SHOAL_KUBE_APISERVER=0 leaves it out.
KUBE_TOOLS_MODULE="$ROOT/tools/kube-apiserver"
kube_tools_dir() {
  echo "$SHOAL_CACHE/tools/kube-apiserver-$(sed -n 's/^[[:space:]]*\(require[[:space:]]*\)\{0,1\}k8s\.io\/kubernetes \(v[0-9][^ ]*\).*/\2/p' "$KUBE_TOOLS_MODULE/go.mod")"
}
install_kube_apiserver() {
  local dir go="${SHOAL_GO:-/usr/local/go/bin/go}" want have
  dir="$(kube_tools_dir)"
  mkdir -p "$SHOAL_CACHE/tools"
  if [ "${SHOAL_KUBE_APISERVER:-1}" = 0 ]; then
    echo "SHOAL_KUBE_APISERVER=0: not built" > "$dir.skipped"; return 0
  fi
  if [ ! -x "$go" ] && ! go="$(command -v go)"; then
    step "kube-apiserver: no Go toolchain (/usr/local/go/bin/go or go on PATH): the tests that need it will skip"
    echo "no Go toolchain to build it (/usr/local/go/bin/go)" > "$dir.skipped"; return 0
  fi
  want="$(cat "$KUBE_TOOLS_MODULE/go.mod" "$KUBE_TOOLS_MODULE/go.sum" | sha256sum | cut -d' ' -f1)"
  have="$(cat "$dir/.stamp" 2>/dev/null || true)"
  if [ "$want" = "$have" ] && [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kubectl" ]; then
    step "kube-apiserver and kubectl $(basename "$dir" | sed 's/^kube-apiserver-//'): built in $dir"
    rm -f "$dir.skipped"; return 0
  fi
  step "Building kube-apiserver and kubectl (tools/kube-apiserver) into $dir (Go caches in $SHOAL_CACHE/go; cold: about 40 min on 2 busy cores)"
  local rc=0 start=$SECONDS version ldflags="" pkg
  version="${dir##*/kube-apiserver-}"
  mkdir -p "$dir"
  # The version both binaries report (kubectl version, /version), as Kubernetes' own build
  # stamps it.
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$(echo "$version" | sed 's/^v\([0-9]*\)\..*/\1/')"
    ldflags+=" -X $pkg.gitMinor=$(echo "$version" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/') -X $pkg.gitTreeState=clean"
  done
  # -v names each package as it is compiled: every 200th is shown, so a long cold build shows
  # that it goes on.
  (cd "$KUBE_TOOLS_MODULE" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
     GOMODCACHE="$SHOAL_CACHE/go/mod" GOCACHE="$SHOAL_CACHE/go/build" \
     nice -n 10 "$go" build -v -trimpath -ldflags "$ldflags" -o "$dir/" \
       k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl 2>&1 |
     awk '/^(#|go: |.*\.go:[0-9])/ {print; next} {n++} n % 200 == 0 {print "  ... " n " packages compiled"; fflush()}'
   exit "${PIPESTATUS[0]}") || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "go build of tools/kube-apiserver exited $rc (see the set-up log)" > "$dir.skipped"
    echo "kube-apiserver: build failed ($rc): the tests that need it will skip"; return 0
  fi
  echo "$want" > "$dir/.stamp"
  rm -f "$dir.skipped"
  echo "  built $("$dir/kube-apiserver" --version) and kubectl in $((SECONDS - start)) s"
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
  # SHOAL_WITH_CUDA=AUTO: the CUDA parts (GPU fold, CUDA executor, their tests) are compiled
  # when nvcc is found (cuda_toolkit_args), for sm_90 only to keep nvcc's time small.
  cuda_toolkit_args
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSHOAL_PYTHON="$VENV/bin/python" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "${CUDA_ARGS[@]}" >/dev/null
  grep -E "^SHOAL_WITH_CUDA|^CMAKE_CUDA_COMPILER:" "$BUILD/CMakeCache.txt" | sed 's/^/  /' || true
  # Where oneDNN came from (cmake/ShoalDnnl.cmake): the venv's onednn wheels, or none.
  sed -n 's|^dnnl_DIR:PATH=\(.*\)/lib/cmake/dnnl$|  oneDNN: \1 (onednn-devel-cpu-gomp, onednn-cpu-gomp)|p; s|^dnnl_DIR:PATH=.*NOTFOUND$|  oneDNN: not found: CPU executor and lm off|p' "$BUILD/CMakeCache.txt"
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
  # The 2 MiB hugetlbfs the dpdk backend maps its pool in, mounted as a node set up for it has it
  # (a shoald without CAP_SYS_ADMIN, as in the DaemonSet, cannot mount it itself). Left mounted.
  if [ "$(id -u)" -eq 0 ] && ! grep -qs "^[^ ]* /dev/hugepages hugetlbfs" /proc/mounts; then
    mkdir -p /dev/hugepages
    mount -t hugetlbfs -o pagesize=2M,mode=0755 nodev /dev/hugepages 2>/dev/null &&
      echo "hugetlbfs: mounted at /dev/hugepages" ||
      echo "hugetlbfs: could not mount /dev/hugepages: the dpdk pool backend tests will skip"
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

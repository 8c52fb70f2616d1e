#!/usr/bin/env bash
# Checks the OCI archive scripts/image wrote (it runs at set-up time, never here: building it
# downloads Debian packages): unpacks its layers, runs shoald --version, shoal --help and
# shoal-controller --help in a chroot of its root filesystem, and checks that no file in it is
# world-writable, that no compiler is in it, and that it runs as the DaemonSet's user.
# Usage: image_test.sh REPO_ROOT BUILD_DIR. Exit 77 (skipped) naming why it cannot run.
set -euo pipefail
root="$1"; build="$2"
archive="${SHOAL_IMAGE_ARCHIVE:-$build/shoal-image.oci.tar}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ ! -f "$archive" ]; then
  why="$(cat "$build/shoal-image.skipped" 2>/dev/null || echo "scripts/image has not been run")"
  echo "SKIP: $archive is missing: $why"
  exit 77
fi
[ "$(id -u)" -eq 0 ] || { echo "SKIP: chroot needs root"; exit 77; }
fail=0
bad() { echo "FAIL: $*"; fail=1; }
work="$(mktemp -d /tmp/shoal-image-test.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/oci" "$work/rootfs"
tar -xf "$archive" -C "$work/oci"
read -r config layers < <(python3 - "$work/oci" <<'PY'
import json, sys, os
oci = sys.argv[1]
blob = lambda d: os.path.join(oci, "blobs", *d.split(":"))
index = json.load(open(os.path.join(oci, "index.json")))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
print(blob(manifest["config"]["digest"]), ",".join(blob(l["digest"]) for l in manifest["layers"]))
PY
)
IFS=, read -r -a layer_files <<< "$layers"
for l in "${layer_files[@]}"; do tar -xf "$l" -C "$work/rootfs"; done
echo "image: $(( $(stat -c %s "$archive") / 1048576 )) MiB archive, ${#layer_files[@]} layer(s), root filesystem $(( $(du -sb "$work/rootfs" | cut -f1) / 1048576 )) MiB"

out="$(chroot "$work/rootfs" /opt/shoal/bin/shoald --version 2>&1)" || bad "shoald --version: $out"
[ "$out" = "shoald 0.1.0" ] || bad "shoald --version printed '$out'"
echo "chroot: shoald --version: $out"
out="$(chroot "$work/rootfs" /opt/shoal/bin/shoal --help 2>&1)" || bad "shoal --help: $out"
grep -q '^Usage: .*shoal \[OPTIONS\] SUBCOMMAND' <<< "$out" || bad "shoal --help: $out"
out="$(chroot "$work/rootfs" /opt/shoal/bin/shoal-controller --help 2>&1)" || bad "shoal-controller --help: $out"
grep -q -- '--etcd' <<< "$out" || bad "shoal-controller --help: $out"
echo "chroot: shoal --help and shoal-controller --help: ok"

for f in opt/shoal/bin/shoal-fn opt/shoal/lib/shoal/shoal_dataplane.bpf.o \
         opt/shoal/share/examples/echo.yaml bin/sh usr/bin/install; do
  [ -e "$work/rootfs/$f" ] || bad "/$f is missing"
done
ls "$work/rootfs/opt/shoal/lib/shoal/handlers/"*.so >/dev/null 2>&1 || bad "no handlers in /opt/shoal/lib/shoal/handlers"
# Every module's libraries resolve inside the image (the inference module's libdnnl.so.3 comes
# from the venv's oneDNN wheel into /opt/shoal/lib, found through the image's ld.so.conf).
while IFS= read -r -d '' so; do
  rel="/${so#"$work/rootfs/"}"
  out="$(chroot "$work/rootfs" /lib64/ld-linux-x86-64.so.2 --list "$rel" 2>&1)" || bad "ld.so --list $rel: $out"
  if grep -q "not found" <<< "$out"; then bad "$rel: $(grep "not found" <<< "$out" | tr -s ' \t\n' ' ')"; fi
done < <(find "$work/rootfs/opt/shoal/lib" -name '*.so' -print0)
echo "modules: every library resolves in the image"

# World-writable: no file; directories only with the sticky bit (/tmp, /var/tmp).
ww="$(cd "$work/rootfs" && find . -xdev -perm -0002 ! -type l ! \( -type d -perm -1000 \) | head -20)"
[ -z "$ww" ] || bad "world-writable: $ww"
echo "world-writable files: ${ww:-none}"
# No compiler: no such executable, and no such package in dpkg's status.
cc="$(cd "$work/rootfs" && find . -xdev -type f -perm /111 \( -name gcc -o -name 'gcc-[0-9]*' \
      -o -name g++ -o -name 'g++-[0-9]*' -o -name cc -o -name c++ -o -name 'clang*' -o -name 'cc1*' \
      -o -name ld -o -name 'ld.bfd' -o -name 'ld.gold' -o -name as -o -name tcc -o -name rustc \
      -o -name go \) | head)"
cc+="$(grep -E '^Package: (gcc(-[0-9]+)?|g\+\+(-[0-9]+)?|clang(-[0-9]+)?|cpp(-[0-9]+)?|binutils|tcc|rustc|golang-go)$' \
       "$work/rootfs/var/lib/dpkg/status" || true)"
[ -z "$cc" ] || bad "compiler found: $cc"
echo "compilers: ${cc:-none}"

user="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"].get("User",""))' "$config")"
if command -v kubectl >/dev/null && [ -d "$here/node_modules/yaml" ]; then
  want="$(kubectl kustomize "$root/deploy/k8s" 2>/dev/null | NODE_PATH="$here/node_modules" node -e '
    const docs = require("yaml").parseAllDocuments(require("fs").readFileSync(0, "utf8")).map((d) => d.toJS());
    const ds = docs.find((d) => d && d.kind === "DaemonSet" && d.metadata.name === "shoald");
    const c = ds.spec.template.spec.containers.find((c) => c.name === "shoald");
    process.stdout.write(String(c.securityContext.runAsUser));')"
  [ "${user%%:*}" = "$want" ] || bad "image user '$user', DaemonSet runAsUser '$want'"
  grep -q ":x:65532:" "$work/rootfs/etc/passwd" || bad "no user 65532 (the controller's runAsUser) in /etc/passwd"
  echo "user: image '$user', DaemonSet runAsUser $want"
else
  echo "note: kubectl or tests/k8s/node_modules missing: the image user ($user) is not compared"
fi
exit $fail

"""A real Kubernetes API server for tests/k8s: kube-apiserver and kubectl as scripts/lib.sh's
install_kube_apiserver built them (tools/kube-apiserver's pinned release), a real etcd on
loopback ports, real TLS (a CA and a serving certificate made now with openssl), static-token
authentication (--token-auth-file: an admin in system:masters), RBAC authorisation, and
service-account tokens signed by the API server itself (kubectl create token). No kubelet, no
controller manager and no scheduler: pods are never run (tests/k8s's k8s_pod emulates one).
"""

import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import ETCD, ROOT, Proc, free_port, start_etcd  # noqa: E402

ADMIN_TOKEN = "shoal-test-admin-token"


def tools_dir():
    """$SHOAL_CACHE/tools/kube-apiserver-<version> (the version tools/kube-apiserver/go.mod
    pins), as scripts/lib.sh names it."""
    with open(os.path.join(ROOT, "tools", "kube-apiserver", "go.mod")) as f:
        version = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes (v[0-9]\S*)", f.read(),
                            re.M).group(1)
    cache = os.environ.get("SHOAL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "shoal")
    return os.path.join(cache, "tools", f"kube-apiserver-{version}")


def skip_reason():
    """Why the API server cannot run here, or None."""
    d = tools_dir()
    for b in ("kube-apiserver",):
        if not os.access(os.path.join(d, b), os.X_OK):
            why = ""
            if os.path.exists(d + ".skipped"):
                with open(d + ".skipped") as f:
                    why = ": " + f.read().strip()
            return f"{d}/{b} is not built (scripts/lib.sh install_kube_apiserver{why})"
    if kubectl_path() is None:
        return "no kubectl: neither built with kube-apiserver nor /usr/bin/kubectl"
    if not os.access(ETCD, os.X_OK):
        return f"{ETCD} is missing (Debian etcd-server)"
    if not os.access("/usr/bin/openssl", os.X_OK):
        return "/usr/bin/openssl is missing"
    return None


def kubectl_path():
    """The kubectl built with kube-apiserver (the same release), else Debian's."""
    for p in (os.path.join(tools_dir(), "kubectl"), "/usr/bin/kubectl"):
        if os.access(p, os.X_OK):
            return p
    return None


def _openssl(*args, cwd):
    subprocess.run(["/usr/bin/openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d):
    """A CA, the API server's serving certificate (127.0.0.1, localhost) and the key pair that
    signs service-account tokens, in `d`."""
    os.makedirs(d, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "2", "-subj", "/CN=shoal-test-ca", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
             "server.csr", "-subj", "/CN=kube-apiserver", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
                "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.ext", cwd=d)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


class KubeApiServer:
    """etcd + kube-apiserver on loopback; `kubectl(...)` as the admin (or with `token`),
    `request(...)` for raw HTTPS calls; restart() keeps etcd (its objects) and the port."""

    def __init__(self, tmp):
        self.tmp, self.dir = tmp, tools_dir()
        self.certs = os.path.join(tmp, "pki")
        make_certs(self.certs)
        self.token_file = os.path.join(tmp, "tokens.csv")
        with open(self.token_file, "w") as f:
            f.write(f'{ADMIN_TOKEN},shoal-test-admin,1000,"system:masters"\n')
        self.etcd, self.etcd_url = start_etcd(tmp)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = os.path.join(tmp, "admin.kubeconfig")
        self.write_kubeconfig(self.kubeconfig, ADMIN_TOKEN)
        self.ssl = ssl.create_default_context(cafile=os.path.join(self.certs, "ca.crt"))
        self.proc = None
        self.start()

    def write_kubeconfig(self, path, token):
        with open(path, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "test",
                       "clusters": [{"name": "test", "cluster": {
                           "server": self.url,
                           "certificate-authority": os.path.join(self.certs, "ca.crt")}}],
                       "users": [{"name": "u", "user": {"token": token}}],
                       "contexts": [{"name": "test",
                                     "context": {"cluster": "test", "user": "u"}}]}, f)

    def start(self):
        c = self.certs
        argv = [os.path.join(self.dir, "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}", "--etcd-prefix=/registry",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={c}/server.crt", f"--tls-private-key-file={c}/server.key",
                f"--token-auth-file={self.token_file}", "--anonymous-auth=false",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={c}/sa.pub",
                f"--service-account-signing-key-file={c}/sa.key",
                "--service-cluster-ip-range=10.96.0.0/24", "--endpoint-reconciler-type=none",
                f"--cert-dir={self.tmp}/apiserver-certs", "--profiling=false"]
        self.proc = Proc(argv, os.path.join(self.tmp, "kube-apiserver.log"))
        deadline = time.time() + 90
        while time.time() < deadline:
            if self.proc.p.poll() is not None:
                raise AssertionError("kube-apiserver exited:\n" + self.proc.log()[-4000:])
            try:
                if self.request("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise AssertionError("kube-apiserver not ready in 90 s:\n" + self.proc.log()[-4000:])

    def stop(self):
        if self.proc is not None:
            self.proc.close()
            self.proc = None

    def restart(self):
        self.stop()
        self.start()

    def close(self):
        self.stop()
        self.etcd.close()

    def request(self, path, method="GET", body=None, token=ADMIN_TOKEN,
                content_type="application/json"):
        """(status, parsed JSON or text) of one HTTPS request to the API server."""
        headers = {"Authorization": f"Bearer {token}"}
        data = None
        if body is not None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ssl) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def kubectl(self, *args, stdin=None, check=True, token=None, timeout=120):
        argv = [kubectl_path(), f"--kubeconfig={self.kubeconfig}"]
        if token is not None:
            argv.append(f"--token={token}")
        r = subprocess.run(argv + list(args), input=stdin, text=True, capture_output=True,
                           timeout=timeout, env={"PATH": "/usr/bin:/bin", "HOME": self.tmp})
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {r.returncode}:\n"
                                 f"{r.stdout}{r.stderr}")
        return r

    def install_crds_and_rbac(self):
        """deploy/k8s/core's CRDs (established) and its RBAC in namespace shoal, the controller's
        ServiceAccount token (signed by this API server): what the operator needs."""
        core = os.path.join(ROOT, "deploy", "k8s", "core")
        self.kubectl("apply", "--server-side", "-f", os.path.join(core, "crds.yaml"))
        self.kubectl("apply", "--server-side", "-f", os.path.join(core, "namespace.yaml"))
        self.kubectl("apply", "--server-side", "-n", "shoal", "-f",
                     os.path.join(core, "rbac.yaml"))
        self.wait_crds()

    def wait_crds(self):
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                     "crd/fljobs.shoal.dev", "crd/functions.shoal.dev")

    def service_account_token(self, name="shoal-controller", namespace="shoal"):
        return self.kubectl("create", "token", name, "-n", namespace,
                            "--duration=2h").stdout.strip()

"""The Python SDK as a package: shoal/fl/sdk/python's pyproject.toml builds a wheel offline (pip wheel
--no-index --no-build-isolation, with the venv's flit-core), the wheel holds the package and its
py.typed marker and carries the server's version, installs into a target directory, imports
from there, and the SDK's own tests pass against that install (not the source tree).

Arguments come from the environment (tests/fl/sdk/CMakeLists.txt): SHOAL_SOURCE (the
repository) and SHOAL_VERSION (CMakeLists.txt's project version, the server's).
"""

import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.environ["SHOAL_SOURCE"]
VERSION = os.environ["SHOAL_VERSION"]
SDK = os.path.join(ROOT, "shoal", "fl", "sdk", "python")
MODULES = sorted(f for f in os.listdir(os.path.join(SDK, "shoal_fl")) if f.endswith(".py"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(wheel path, target dir it is installed in)."""
    tmp = tmp_path_factory.mktemp("sdk")
    before = sorted(os.listdir(SDK))
    dist, target = tmp / "dist", tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "--quiet", "--wheel-dir", str(dist), SDK],
                   check=True, cwd=tmp)
    assert sorted(os.listdir(SDK)) == before, "building the wheel wrote into shoal/fl/sdk/python"
    wheels = sorted(os.listdir(dist))
    assert wheels == [f"shoal_fl-{VERSION}-py3-none-any.whl"]
    wheel = dist / wheels[0]
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--quiet", "--target", str(target), str(wheel)], check=True, cwd=tmp)
    return wheel, target


def test_wheel_holds_the_typed_package_at_the_server_version(built):
    wheel, _ = built
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(f"shoal_fl-{VERSION}.dist-info/METADATA").decode()
    assert "shoal_fl/py.typed" in names
    assert {f"shoal_fl/{m}" for m in MODULES} <= names
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]
    lines = metadata.splitlines()
    assert "Name: shoal-fl" in lines
    assert f"Version: {VERSION}" in lines
    assert "Requires-Dist: numpy" in lines
    assert "Classifier: Typing :: Typed" in lines


def _python(target, *args, cwd):
    env = dict(os.environ, PYTHONPATH=str(target))
    return subprocess.run([sys.executable, "-P", *args], env=env, cwd=cwd, text=True,
                          capture_output=True)


def test_installed_wheel_imports_with_its_version(built, tmp_path):
    _, target = built
    r = _python(target, "-c", "import importlib.metadata as m, os, shoal_fl; "
                "print(os.path.dirname(shoal_fl.__file__)); print(shoal_fl.__version__); "
                "print(m.version('shoal-fl')); "
                "print(os.path.exists(os.path.join(os.path.dirname(shoal_fl.__file__), "
                "'py.typed')))", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(target / "shoal_fl"), VERSION, VERSION, "True"]


def test_sdk_tests_pass_against_the_installed_wheel(built, tmp_path):
    _, target = built
    r = _python(target, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                os.path.join(SDK, "tests"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout.splitlines()[-1] and "failed" not in r.stdout.splitlines()[-1]

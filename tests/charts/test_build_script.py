"""docker/build-image.sh when two test runs start at once on a machine without a running engine
(``test_image.py`` builds for real; here apt-get, dockerd and docker are stand-ins, so the race is
certain and nothing on the machine is installed).

The stand-in apt-get keeps dpkg's frontend lock as the real one does: an apt-get that finds it held
fails at once with dpkg's message unless it was given ``-o DPkg::Lock::Timeout=N``, in which case it
waits up to N seconds. The holder keeps the lock until a contender shows up (or a few seconds pass),
so a second apt-get always meets it held."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[2]

APT_GET = r"""#!/bin/sh
# dpkg's frontend lock, held for the whole install; Debian's message when it is taken.
timeout=0
while [ $# -gt 0 ]; do
    case "$1" in
        -o) case "$2" in DPkg::Lock::Timeout=*) timeout="${2#*=}" ;; esac; shift 2 ;;
        *) break ;;
    esac
done
waited=0
until mkdir "$STATE/dpkg-lock" 2>/dev/null; do
    touch "$STATE/contended"
    if [ "$waited" -ge "$((timeout * 10))" ]; then
        echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1" >&2
        exit 100
    fi
    sleep 0.1; waited=$((waited + 1))
done
case "$1" in
    install)
        echo install >>"$STATE/apt-installs"
        touch "$STATE/locked"
        # hold the lock until another apt-get has met it, or five seconds
        n=0
        while [ ! -e "$STATE/contended" ] && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
        cp "$STATE/dockerd.template" "$FAKE_BIN/dockerd"; chmod +x "$FAKE_BIN/dockerd" ;;
esac
rmdir "$STATE/dpkg-lock"
"""

DOCKERD = r"""#!/bin/sh
# The real daemon refuses to start beside a running one (its pid file), and runs on with every
# descriptor it was started with.
echo start >>"$STATE/dockerd-starts"
mkdir "$STATE/dockerd-pid" 2>/dev/null \
    || { echo "pid file found, ensure docker is not running" >&2; exit 1; }
echo $$ >"$STATE/dockerd-pid/pid"
touch "$STATE/running"
exec sleep 300
"""

DOCKER = r"""#!/bin/sh
case "$1" in
    info) [ -e "$STATE/running" ] ;;
    image) [ "$2" = inspect ] && { [ "$3" = -f ] && echo 123000000; exit 0; } ;;
    build)  # the context is the last argument; another build must not take its bundle away
        for context; do :; done
        sleep 0.5
        handed="$context/docker/build-local"
        jars="$handed/jars"
        if [ -s "$handed/ca-certificates.crt" ] && [ -s "$jars/s3a.jar" ] \
            && [ -s "$jars/finishable-spark.jar" ]; then echo build
        else echo build-without-what-it-was-handed; fi >>"$STATE/builds" ;;
    run) case "$*" in *" -u") echo 1000 ;; *) echo "finishable 0.1.0" ;; esac ;;
    *) exit 1 ;;
esac
"""


SPARK_JARS = """#!/bin/sh
mkdir -p "$1" && echo jar >"$1/s3a.jar"
"""
JVM_BUILD = """#!/bin/sh
mkdir -p "$1" && [ -d "$2" ] && echo jar >"$1/finishable-spark.jar"
"""


def write_script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock (util-linux) is not installed")
def test_two_builds_at_once_install_and_start_the_engine_once(tmp_path: Path) -> None:
    root = tmp_path / "checkout"  # a copy: the build hands files to docker/build-local/
    (root / "docker" / "build-local").mkdir(parents=True)
    shutil.copy(ROOT / "docker" / "build-image.sh", root / "docker" / "build-image.sh")
    # Spark's S3 connector, as docker/spark-jars.sh hands it (tests/charts/test_spark_jars.py)
    write_script(root / "docker" / "spark-jars.sh", SPARK_JARS)
    (root / "jvm").mkdir()  # and the project's data source, as jvm/build.sh hands it
    write_script(root / "jvm" / "build.sh", JVM_BUILD)
    (root / ".venv" / "bin").mkdir(parents=True)  # whose pyspark jvm/ is compiled against
    write_script(root / ".venv" / "bin" / "python", f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    fake_bin, state = tmp_path / "bin", tmp_path / "state"
    fake_bin.mkdir()
    state.mkdir()
    write_script(fake_bin / "apt-get", APT_GET)
    write_script(fake_bin / "docker", DOCKER)
    write_script(fake_bin / "sudo", '#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n')
    (state / "dockerd.template").write_text(DOCKERD)
    bundle = tmp_path / "ca-certificates.crt"  # what the builds hand docker/build-local/
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    # this machine's directories, less any with a real docker daemon: the engine is not installed
    system = [d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "dockerd").exists()]
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(fake_bin), *system]),
        "STATE": str(state),
        "FAKE_BIN": str(fake_bin),
        "TMPDIR": str(tmp_path),
        "SSL_CERT_FILE": str(bundle),
    }

    def build(tag: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["sh", str(root / "docker" / "build-image.sh"), f"finishable-spark-operator:{tag}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    runs = [build("first")]
    try:
        deadline = time.monotonic() + 120
        while not (state / "locked").exists():  # the first build's apt-get holds dpkg's lock
            assert runs[0].poll() is None, runs[0].communicate()
            assert time.monotonic() < deadline, "the first build never ran apt-get"
            time.sleep(0.05)
        runs.append(build("second"))
        # a build still waiting here was left waiting on the lock (by the daemon, say)
        results = [(*run.communicate(timeout=120), run.returncode) for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
        daemon = state / "dockerd-pid" / "pid"
        if daemon.exists():
            os.kill(int(daemon.read_text()), signal.SIGKILL)

    for out, err, code in results:
        assert code == 0, err
        assert out.split()[1:] == ["123", "MB"], out
    assert (state / "apt-installs").read_text().split() == ["install"], "docker.io installed once"
    assert (state / "dockerd-starts").read_text().split() == ["start"], "dockerd started once"
    assert (state / "builds").read_text().split() == ["build", "build"]
    assert not list(tmp_path.glob("finishable-image-build.*.log")), "a good build keeps no log"
    assert sorted(p.name for p in (root / "docker" / "build-local").iterdir()) == [], "handed back"

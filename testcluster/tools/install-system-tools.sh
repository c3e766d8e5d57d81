#!/bin/sh
# Install the Debian packages the tests run for real when they are missing: prometheus (the server
# the e2e suite scrapes the operator with, and promtool, which checks and unit-tests the chart's
# alerting rules), shellcheck (the kind script's lint), postgresql (the server the PostgreSQL
# sink example's tests start on loopback), and the real node's runtime (containerd, runc, the CNI
# plugins, iptables; testcluster/controlplane/realnode.py), and the JDK's javac (jvm/build.sh
# compiles the project's Spark data source). Nothing happens when all are present.
#
# usage: testcluster/tools/install-system-tools.sh
set -eu

# Two test runs starting at once on a fresh machine: the second waits here for the first one's
# apt-get (dpkg allows one at a time), then finds the tools installed.
lock="${TMPDIR:-/tmp}/finishable-install-system-tools.lock"
if [ -z "${FINISHABLE_TOOLS_LOCKED:-}" ] && command -v flock >/dev/null 2>&1; then
    FINISHABLE_TOOLS_LOCKED=1 exec flock "$lock" sh "$0" "$@"
fi

missing=""
for pair in prometheus:prometheus promtool:prometheus shellcheck:shellcheck \
    containerd:containerd ctr:containerd runc:runc iptables:iptables nsenter:util-linux \
    ip:iproute2 javac:openjdk-17-jdk-headless; do
    command="${pair%%:*}" package="${pair#*:}"
    if ! command -v "$command" >/dev/null 2>&1; then
        case " $missing " in *" $package "*) ;; *) missing="$missing $package" ;; esac
    fi
done
# Debian keeps the server's programs off PATH, under /usr/lib/postgresql/VERSION/bin.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    missing="$missing postgresql"
fi
[ -x /usr/lib/cni/bridge ] || missing="$missing containernetworking-plugins"  # not on PATH either
[ -z "$missing" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system-tools: missing$missing and no apt-get here: install them with your" >&2
    echo "  package manager (prometheus 2.x with promtool, shellcheck, postgresql, containerd," \
         "runc, containernetworking-plugins, iptables, iproute2, a JDK 17)" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"
    else
        echo "install-system-tools: missing$missing; run as root: apt-get install$missing" >&2
        exit 1
    fi
fi
echo "install-system-tools: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# Another apt-get (not ours: the lock above covers those) gets ten minutes to finish.
apt="$SUDO apt-get -o DPkg::Lock::Timeout=600"
# shellcheck disable=SC2086  # $apt is a command with options, $missing a list of package names
$apt install -y --no-install-recommends $missing >/dev/null \
    || { $apt update -q >/dev/null && $apt install -y --no-install-recommends $missing >/dev/null; }

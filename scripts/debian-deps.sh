#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo need, only when they are missing:
# mosquitto (the reference broker of the benchmarks and of the test suite's cross-checks), its command-line
# clients, iptables (partitions in the cluster tests and the chaos experiments), a Java runtime (PySpark),
# libfaketime (the chaos clock-skew nemesis) and nss_wrapper (the chaos fault proxy, which gives each node its own
# name resolution), HAProxy (the load-balancer tests), Chromium with its driver (the status page's browser
# test) and Prometheus with promtool (a real scrape of a cluster checks the Grafana dashboard's queries), and a C
# compiler with Python's headers (the compiled core, vmqpy/native.py; without them the install is pure Python).
set -euo pipefail
need=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
command -v mosquitto_pub >/dev/null 2>&1 || need+=(mosquitto-clients)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || need+=(iptables)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)  # PySpark (the analytics tests) needs a JVM
ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || need+=(libfaketime)
ls /usr/lib/*/libnss_wrapper.so >/dev/null 2>&1 || need+=(libnss-wrapper)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)  # the load-balancer tests
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the status page's browser test
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)  # Selenium drives the system Chromium
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || need+=(prometheus)  # the scrape test
command -v cc >/dev/null 2>&1 || need+=(gcc)  # the compiled core (setup.py)
include=$("${PY:-python3}" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
if [ -n "$include" ] && [ ! -f "$include/Python.h" ]; then
  case "$include" in /usr/*) need+=(python3-dev) ;; *) echo "no Python.h in $include: the core is installed pure" >&2 ;; esac
fi
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "installing Debian packages: ${need[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "need root (or sudo) to install: ${need[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"

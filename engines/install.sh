#!/usr/bin/env bash
# Set up the Flink and Spark runners for beam-dp on this machine (`make engines`):
#
#   1. Java 17 and Maven (Debian's openjdk-17-jre-headless and maven, installed when missing and
#      this is root with apt-get);
#   2. Beam's Flink 1.19 and Spark 3 job servers, built by Maven from Beam's runner libraries
#      (engines/pom.xml) and installed in Beam's jar cache (~/.apache_beam/cache/jars) under the
#      names the pinned Beam Python SDK looks for, so that `--runner FlinkRunner
#      --flink_version 1.19` and `--runner SparkRunner` need no jar flag and no network at run
#      time (engines/README.md says why the names differ from what the jars are);
#   3. a Flink 1.19.3 distribution (bin/, conf/, lib/: a local cluster's JobManager and
#      TaskManager) from PyPI's apache-flink packages, in a venv of its own.
#
# Everything is cached between runs on one machine: Maven's downloads in ~/.m2, the built jars
# in Beam's jar cache (rebuilt only when a pom changes: its digest is kept beside each jar), the
# Flink distribution under $BEAM_DP_ENGINES_CACHE (default ~/.cache/beam-dp/engines).
# A failure to build or install exits non-zero; missing Java or Maven that cannot be installed
# (not root) is a warning: the engine tests then skip locally and fail under CI.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BEAM_PYTHON_VERSION=2.77.0   # the apache-beam pin in setup.py (checked below)
BEAM_JAVA_VERSION=2.62.0     # engines/pom.xml's beam.version
FLINK_DIST_VERSION=1.19.3
JAR_CACHE="$HOME/.apache_beam/cache/jars"
ENGINES_CACHE="${BEAM_DP_ENGINES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/beam-dp/engines}"
PYTHON="${PYTHON:-python3}"

say() { echo "engines: $*"; }
warn() { echo "engines: warning: $*" >&2; }

if ! grep -q "apache-beam\[dask\]==$BEAM_PYTHON_VERSION" "$HERE/../setup.py"; then
  echo "engines: setup.py no longer pins apache-beam $BEAM_PYTHON_VERSION: update" \
    "BEAM_PYTHON_VERSION in engines/install.sh (the jar names follow the SDK's version)" >&2
  exit 1
fi

java17() {  # prints the java executable of a Java 17, if there is one
  local candidate
  for candidate in "${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)" \
    /usr/lib/jvm/java-17-openjdk-*/bin/java; do
    [ -n "$candidate" ] && [ -x "$candidate" ] || continue
    if "$candidate" -version 2>&1 | head -1 | grep -q '"17\.'; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's $* for the Flink and Spark runners"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    return 0
  fi
  return 1
}

if ! java17 >/dev/null || ! command -v mvn >/dev/null 2>&1; then
  if ! apt_install openjdk-17-jre-headless maven; then
    warn "no Java 17 or no Maven, and cannot install them (root with apt-get needed):" \
      "install openjdk-17-jre-headless and maven for the Flink and Spark runners"
    exit 0
  fi
fi
JAVA="$(java17)"
export JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$JAVA")")")"

# --- 2. the job servers ---------------------------------------------------------------------
digest="$(cat "$HERE/pom.xml" "$HERE/flink-job-server/pom.xml" "$HERE/spark-job-server/pom.xml" \
  | sha256sum | cut -c1-16)"
declare -A BUILT=(
  [flink-job-server/target/beam-runners-flink-1.19-job-server-$BEAM_JAVA_VERSION.jar]="beam-runners-flink-1.19-job-server-$BEAM_PYTHON_VERSION.jar"
  [spark-job-server/target/beam-runners-spark-3-job-server-$BEAM_JAVA_VERSION.jar]="beam-runners-spark-3-job-server-$BEAM_PYTHON_VERSION.jar"
)
up_to_date=1
for target in "${BUILT[@]}"; do
  if [ ! -s "$JAR_CACHE/$target" ] || [ "$(cat "$JAR_CACHE/$target.beam-dp" 2>/dev/null | head -1)" != "pom digest $digest" ]; then
    up_to_date=0
  fi
done
if [ "$up_to_date" = 1 ]; then
  say "job servers up to date in $JAR_CACHE (pom digest $digest)"
else
  say "building Beam $BEAM_JAVA_VERSION's Flink and Spark job servers with Maven (first time:" \
    "about 360 MB of downloads into ~/.m2)"
  start=$(date +%s)
  mvn -B -q -Dstyle.color=never -f "$HERE/pom.xml" package
  say "built in $(( $(date +%s) - start )) s"
  mkdir -p "$JAR_CACHE"
  for built in "${!BUILT[@]}"; do
    target="${BUILT[$built]}"
    cp "$HERE/$built" "$JAR_CACHE/.$target.partial"
    mv -f "$JAR_CACHE/.$target.partial" "$JAR_CACHE/$target"
    printf 'pom digest %s\nthis is %s, built by beam-dp (engines/install.sh) from Beam Java %s runner libraries; named for the Beam Python SDK %s that looks it up (see README.beam-dp.txt)\n' \
      "$digest" "$(basename "$built")" "$BEAM_JAVA_VERSION" "$BEAM_PYTHON_VERSION" \
      > "$JAR_CACHE/$target.beam-dp"
  done
  cat > "$JAR_CACHE/README.beam-dp.txt" <<EOF
Two jars here were put by beam-dp's engines/install.sh (make engines), not downloaded by Beam:

  beam-runners-flink-1.19-job-server-$BEAM_PYTHON_VERSION.jar
  beam-runners-spark-3-job-server-$BEAM_PYTHON_VERSION.jar

They are Beam Java $BEAM_JAVA_VERSION job servers (Flink 1.19 runner; Spark 3 runner with Spark
3.2.2), built with Maven from org.apache.beam:beam-runners-flink-1.19:$BEAM_JAVA_VERSION and
org.apache.beam:beam-runners-spark-3:$BEAM_JAVA_VERSION, because the Maven registry beam-dp
reaches serves no beam-runners-*-job-server jar and no runner library newer than
$BEAM_JAVA_VERSION. They carry the Beam Python SDK's version ($BEAM_PYTHON_VERSION) in their
file names because that is the name the SDK looks up here; their manifests (META-INF/MANIFEST.MF:
Beam-Java-Version, Built-From) say what they are. Delete them to let Beam download its own.
EOF
fi

# --- 3. the Flink distribution (a local cluster's JobManager and TaskManager) ---------------
flink_venv="$ENGINES_CACHE/flink-$FLINK_DIST_VERSION"
if [ -f "$flink_venv/.installed" ]; then
  say "Flink $FLINK_DIST_VERSION distribution up to date in $flink_venv"
else
  say "installing the Flink $FLINK_DIST_VERSION distribution (PyPI's apache-flink, in a venv of" \
    "its own: it pins an old apache-beam, so only its bin/, conf/ and lib/ are used)"
  start=$(date +%s)
  rm -rf "$flink_venv"
  mkdir -p "$ENGINES_CACHE"
  "$PYTHON" -m venv "$flink_venv"
  "$flink_venv/bin/pip" install --quiet --no-deps \
    "apache-flink-libraries==$FLINK_DIST_VERSION" "apache-flink==$FLINK_DIST_VERSION"
  touch "$flink_venv/.installed"
  say "installed in $(( $(date +%s) - start )) s"
fi
home="$(echo "$flink_venv"/lib/python3*/site-packages/pyflink)"
[ -x "$home/bin/start-cluster.sh" ] || { echo "engines: no Flink distribution in $home" >&2; exit 1; }
ln -sfn "$home" "$ENGINES_CACHE/flink-home"
say "FLINK_HOME=$ENGINES_CACHE/flink-home JAVA_HOME=$JAVA_HOME"

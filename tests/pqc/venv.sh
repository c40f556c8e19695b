# The independent implementations the post-quantum tests cross-check against: dilithium-py
# (pure Python ML-DSA, FIPS 204) and slh-dsa (pure Python SLH-DSA, FIPS 205), pinned, from
# PyPI, in a virtual environment kept under target/ so later runs skip the download.
# Prints the environment's python.
set -euo pipefail
cache="$(cd "$(dirname "$0")/../.." && pwd)/target/pqc-python"
mkdir -p "$cache"
(
    flock 9
    if [ ! -f "$cache/ready" ]; then
        rm -rf "$cache/venv"
        python3 -m venv "$cache/venv" >&2 || { echo "FAIL: python3 -m venv (Debian package python3-venv)" >&2; exit 1; }
        "$cache/venv/bin/pip" install -q "dilithium-py==1.5.1" "slh-dsa==0.2.5" >&2
        touch "$cache/ready"
    fi
) 9>"$cache/lock"
echo "$cache/venv/bin/python"

# Shared set-up for the e2e scenarios: a fresh token "e2e" (SO PIN 87654321, user PIN 1234) in
# the scenario's own store. Expects FERROHSM_MODULE, FERROHSM_UTIL and WORK.
set -euo pipefail
need() {
    for c in "$@"; do
        command -v "$c" >/dev/null || { echo "FAIL: $c is not installed (see .ci/run)" >&2; exit 1; }
    done
}
M=$FERROHSM_MODULE
printf '[store]\npath = "%s/store"\n[pin]\nkdf_memory_kib = 1024\nkdf_passes = 1\n' "$WORK" > "$WORK/ferrohsm.toml"
export FERROHSM_CONF="$WORK/ferrohsm.toml"
"$FERROHSM_UTIL" init-token --free --label e2e --so-pin 87654321 --pin 1234 >/dev/null
keygen() { # id label bits
    pkcs11-tool --module "$M" --token-label e2e --login --pin 1234 --keypairgen --key-type "rsa:$3" \
        --id "$1" --label "$2" >/dev/null
}
export_pub() { # id out.pem
    pkcs11-tool --module "$M" --token-label e2e --read-object --type pubkey --id "$1" -o "$WORK/pub.der" >/dev/null
    openssl pkey -pubin -inform DER -in "$WORK/pub.der" -out "$2"
}

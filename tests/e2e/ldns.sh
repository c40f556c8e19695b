# ldns-signzone (ldnsutils) with the libp11 engine: signs a zone with a token RSA key
# (algorithm 8) and another with a token ECDSA P-256 key (algorithm 13; ldns turns the engine's
# DER signature into r||s). ldns-signzone exits 0 even when it could not sign, so the output is
# checked: RRSIGs of the algorithm present and ldns-verify-zone and dnssec-verify accept it.
# Ed25519 (algorithm 15) cannot go this way: ldns-signzone 1.8.3 refuses engine keys of any
# algorithm but RSA, DSA, GOST and ECDSA (`-k "15,pkcs11:..."` exits with "Algorithm 15 cannot be
# used for signing."), whatever the engine holds.
. "$(dirname "$0")/common.sh"
need ldns-signzone ldns-verify-zone openssl
engine_conf "PIN = 1234"
sign() { # algorithm key-label zone
    write_zone "$WORK/$3.zone" "$3"
    # The key id is the libp11 URI.
    ldns-signzone -E pkcs11 -k "$1,pkcs11:token=e2e;object=$2;type=private" -o "$3" \
        -f "$WORK/$3.signed.zone" "$WORK/$3.zone"
    grep -qE "RRSIG[[:space:]]+SOA[[:space:]]+$1[[:space:]]" "$WORK/$3.signed.zone" \
        || { echo "FAIL: $3 came out without algorithm $1 signatures" >&2; exit 1; }
    verify_zone "$WORK/$3.signed.zone" "$3" -z
}
keygen 04 zsk 2048
sign 8 zsk example.org
keygen 05 eczsk EC:prime256v1
sign 13 eczsk example.com
echo "e2e ldns: zones signed with token RSA (8) and ECDSA P-256 (13) keys and verified"

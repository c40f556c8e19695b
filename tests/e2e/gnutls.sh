# GnuTLS (gnutls-bin): p11tool lists the keys, certtool makes a self-signed certificate with
# an RSA-2048, an ECDSA P-256 (GnuTLS signs through CKM_ECDSA over its own SHA-256) and an
# Ed25519 (CKM_EDDSA) token key; OpenSSL checks each certificate's signature and that it carries
# the token's public key.
. "$(dirname "$0")/common.sh"
need p11tool certtool openssl
export GNUTLS_PIN=1234
cat > "$WORK/cert.tmpl" <<TMPL
cn = "ferrohsm e2e"
expiration_days = 30
signing_key
TMPL
selfsigned() { # id label key-type sigalg-name-in-openssl-text
    keygen "$1" "$2" "$3"
    export_pub "$1" "$WORK/$2-pub.pem"
    list=$(p11tool --provider "$M" --login --list-privkeys "pkcs11:token=e2e")
    grep -q "$2" <<<"$list" || { echo "FAIL: p11tool did not list the key $2: $list" >&2; exit 1; }
    certtool --provider "$M" --generate-self-signed --load-privkey "pkcs11:token=e2e;object=$2;type=private" \
        --template "$WORK/cert.tmpl" --outfile "$WORK/$2-cert.pem" 2>/dev/null
    openssl x509 -in "$WORK/$2-cert.pem" -noout -text | grep -q "Signature Algorithm: $4" \
        || { echo "FAIL: the $2 certificate is not signed with $4" >&2; exit 1; }
    openssl verify -CAfile "$WORK/$2-cert.pem" "$WORK/$2-cert.pem"
    cmp <(openssl x509 -in "$WORK/$2-cert.pem" -noout -pubkey | openssl pkey -pubin -outform DER) \
        <(openssl pkey -pubin -in "$WORK/$2-pub.pem" -outform DER)
}
selfsigned 02 gnukey 2048 sha256WithRSAEncryption
selfsigned 03 gnuec EC:prime256v1 ecdsa-with-SHA256
selfsigned 04 gnued EC:edwards25519 ED25519
echo "e2e gnutls: keys listed, RSA, ECDSA and Ed25519 self-signed certificates verified"

# GnuTLS (gnutls-bin): p11tool lists the key, certtool makes a self-signed certificate with it;
# OpenSSL checks the certificate's signature and that it carries the token's public key.
. "$(dirname "$0")/common.sh"
need p11tool certtool openssl
keygen 02 gnukey 2048
export_pub 02 "$WORK/pub.pem"
export GNUTLS_PIN=1234
list=$(p11tool --provider "$M" --login --list-privkeys "pkcs11:token=e2e")
grep -q "gnukey" <<<"$list" || { echo "FAIL: p11tool did not list the key: $list" >&2; exit 1; }
cat > "$WORK/cert.tmpl" <<TMPL
cn = "ferrohsm e2e"
expiration_days = 30
signing_key
TMPL
certtool --provider "$M" --generate-self-signed --load-privkey "pkcs11:token=e2e;object=gnukey;type=private" \
    --template "$WORK/cert.tmpl" --outfile "$WORK/cert.pem" 2>/dev/null
openssl verify -CAfile "$WORK/cert.pem" "$WORK/cert.pem"
openssl x509 -in "$WORK/cert.pem" -noout -pubkey > "$WORK/cert-pub.pem"
cmp <(openssl pkey -pubin -in "$WORK/cert-pub.pem" -outform DER) <(openssl pkey -pubin -in "$WORK/pub.pem" -outform DER)
echo "e2e gnutls: key listed, self-signed certificate verified"

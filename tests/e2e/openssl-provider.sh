# OpenSSL 3 with pkcs11-provider (Debian bookworm-backports): keys by `pkcs11:` URI through the
# provider (it asks for the 3.0 interface first): RSA hash-and-sign PKCS#1 and PSS, ECDSA P-256
# (CKM_ECDSA over OpenSSL's SHA-256, the provider turning r||s into DER) and pure Ed25519
# (CKM_EDDSA), and self-signed certificates with the RSA and the P-256 key; all checked by
# plain OpenSSL with the exported public key.
. "$(dirname "$0")/common.sh"
need openssl pkcs11-tool
provider=$(find /usr/lib -name pkcs11.so -path '*ossl-modules*' | head -1)
[ -n "$provider" ] || { echo "FAIL: pkcs11-provider is not installed (bookworm-backports)" >&2; exit 1; }
cat > "$WORK/openssl.cnf" <<CNF
openssl_conf = openssl_init
[openssl_init]
providers = provider_sect
[provider_sect]
default = default_sect
pkcs11 = pkcs11_sect
[default_sect]
activate = 1
[pkcs11_sect]
module = $provider
pkcs11-module-path = $M
pkcs11-module-token-pin = 1234
activate = 1
CNF
keygen 05 provkey 2048
export_pub 05 "$WORK/pub.pem"
echo "signed through pkcs11-provider" > "$WORK/data"
uri="pkcs11:token=e2e;object=provkey;type=private"
OPENSSL_CONF="$WORK/openssl.cnf" openssl dgst -sha256 -sign "$uri" -out "$WORK/sig" "$WORK/data"
openssl dgst -sha256 -verify "$WORK/pub.pem" -signature "$WORK/sig" "$WORK/data"
OPENSSL_CONF="$WORK/openssl.cnf" openssl dgst -sha256 -sign "$uri" -sigopt rsa_padding_mode:pss \
    -sigopt rsa_pss_saltlen:32 -out "$WORK/pss.sig" "$WORK/data"
openssl dgst -sha256 -verify "$WORK/pub.pem" -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:32 \
    -signature "$WORK/pss.sig" "$WORK/data"
OPENSSL_CONF="$WORK/openssl.cnf" openssl req -new -x509 -key "$uri" -subj "/CN=provider e2e" -days 30 \
    -out "$WORK/cert.pem"
openssl verify -CAfile "$WORK/cert.pem" "$WORK/cert.pem"
# EC keys: ECDSA P-256 and Ed25519 signatures, checked with the public keys read through
# pkcs11-tool; the P-256 key signs a certificate that carries that public key.
keygen 08 provec EC:prime256v1
keygen 09 proved EC:edwards25519
export_pub 08 "$WORK/ec-pub.pem"
export_pub 09 "$WORK/ed-pub.pem"
ecuri="pkcs11:token=e2e;object=provec;type=private"
OPENSSL_CONF="$WORK/openssl.cnf" openssl dgst -sha256 -sign "$ecuri" -out "$WORK/ec.sig" "$WORK/data"
openssl dgst -sha256 -verify "$WORK/ec-pub.pem" -signature "$WORK/ec.sig" "$WORK/data"
# Ed25519 signs the message itself (no digest): pkeyutl -rawin.
OPENSSL_CONF="$WORK/openssl.cnf" openssl pkeyutl -sign -rawin -inkey "pkcs11:token=e2e;object=proved;type=private" \
    -in "$WORK/data" -out "$WORK/ed.sig"
[ "$(stat -c %s "$WORK/ed.sig")" -eq 64 ] || { echo "FAIL: the Ed25519 signature is not 64 bytes" >&2; exit 1; }
openssl pkeyutl -verify -pubin -inkey "$WORK/ed-pub.pem" -rawin -in "$WORK/data" -sigfile "$WORK/ed.sig"
OPENSSL_CONF="$WORK/openssl.cnf" openssl req -new -x509 -key "$ecuri" -sha256 -subj "/CN=provider ec e2e" \
    -days 30 -out "$WORK/ec-cert.pem"
openssl x509 -in "$WORK/ec-cert.pem" -noout -text | grep -q "ecdsa-with-SHA256" \
    || { echo "FAIL: the certificate is not signed with ECDSA" >&2; exit 1; }
openssl verify -CAfile "$WORK/ec-cert.pem" "$WORK/ec-cert.pem"
cmp <(openssl x509 -in "$WORK/ec-cert.pem" -noout -pubkey | openssl pkey -pubin -outform DER) \
    <(openssl pkey -pubin -in "$WORK/ec-pub.pem" -outform DER)
echo "e2e openssl-provider: PKCS#1, PSS, ECDSA P-256 and Ed25519 signatures and RSA and EC certificates verified"

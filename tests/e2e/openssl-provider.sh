# OpenSSL 3 with pkcs11-provider (Debian bookworm-backports): keys by `pkcs11:` URI through the
# provider (it asks for the 3.0 interface first), hash-and-sign PKCS#1 and PSS, and a
# self-signed certificate; all checked by plain OpenSSL with the exported public key.
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
echo "e2e openssl-provider: PKCS#1, PSS and a certificate verified"

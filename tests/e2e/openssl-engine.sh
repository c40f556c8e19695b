# OpenSSL 3 with the libp11 engine (Debian libengine-pkcs11-openssl): PKCS#1 and PSS
# signatures through `pkcs11:` URIs, verified by plain OpenSSL with the exported public key.
. "$(dirname "$0")/common.sh"
need openssl pkcs11-tool
engine_conf
keygen 01 engkey 2048
export_pub 01 "$WORK/pub.pem"
echo "signed through the libp11 engine" > "$WORK/data"
uri="pkcs11:token=e2e;object=engkey;type=private;pin-value=1234"
openssl dgst -sha256 -engine pkcs11 -keyform engine -sign "$uri" -out "$WORK/sig" "$WORK/data"
OPENSSL_CONF=/dev/null openssl dgst -sha256 -verify "$WORK/pub.pem" -signature "$WORK/sig" "$WORK/data"
openssl dgst -sha256 -engine pkcs11 -keyform engine -sign "$uri" -sigopt rsa_padding_mode:pss \
    -sigopt rsa_pss_saltlen:32 -out "$WORK/pss.sig" "$WORK/data"
OPENSSL_CONF=/dev/null openssl dgst -sha256 -verify "$WORK/pub.pem" -sigopt rsa_padding_mode:pss \
    -sigopt rsa_pss_saltlen:32 -signature "$WORK/pss.sig" "$WORK/data"
echo "e2e openssl-engine: PKCS#1 and PSS signatures verified"

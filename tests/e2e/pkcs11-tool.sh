# pkcs11-tool (OpenSC) as its manual drives a token: the slot and its token listed, a login,
# RSA-2048 and ECDSA P-256 key pairs generated, their objects listed (private keys only after
# the login), and signatures with RSA PKCS#1 v1.5 (hash-and-sign, and over a DigestInfo),
# RSA-PSS (hash-and-sign, and over a digest) and ECDSA (over OpenSSL's SHA-256, and
# hash-and-sign), then the token re-initialised by its SO. The openssl CLI checks every
# signature with the public key read from the token, never the module. Runs on the local
# module and through ferrohsm-server (tests/e2e.rs: pkcs11_tool, remote_pkcs11_tool).
. "$(dirname "$0")/common.sh"
need pkcs11-tool openssl
fail() { echo "FAIL: $*" >&2; exit 1; }
tool=(pkcs11-tool --module "$M" --token-label e2e)
user=("${tool[@]}" --login --pin 1234)
slots=$(pkcs11-tool --module "$M" -L)
grep -q "token label *: e2e" <<<"$slots" || fail "the token is not listed: $slots"
grep -q "token initialized" <<<"$slots" || fail "the token is not initialised: $slots"
# A wrong PIN is refused (one failure; the right PIN below clears the count).
if "${tool[@]}" --login --pin 9999 -O >/dev/null 2>&1; then fail "a wrong PIN was accepted"; fi
keygen 01 tool-rsa 2048
keygen 02 tool-ec EC:prime256v1
objects=$("${user[@]}" -O)
[ "$(grep -c "^Private Key Object" <<<"$objects")" -eq 2 ] || fail "not two private keys: $objects"
[ "$(grep -c "^Public Key Object" <<<"$objects")" -eq 2 ] || fail "not two public keys: $objects"
grep -q "label: *tool-ec" <<<"$objects" || fail "no tool-ec: $objects"
public=$("${tool[@]}" -O)
if grep -q "^Private Key Object" <<<"$public"; then fail "private keys listed without a login: $public"; fi
grep -q "label: *tool-rsa" <<<"$public" || fail "the public key tool-rsa is not listed: $public"
export_pub 01 "$WORK/rsa.pem"
export_pub 02 "$WORK/ec.pem"
cd "$WORK"
echo "signed by pkcs11-tool" > data
echo "something else" > other
openssl dgst -sha256 -binary data > digest
sign() { # id mechanism input output [options]
    "${user[@]}" --sign --id "$1" -m "$2" -i "$3" -o "$4" "${@:5}" >/dev/null
}
# RSA PKCS#1 v1.5: hash-and-sign, and CKM_RSA_PKCS over a DigestInfo (SHA-256's prefix).
sign 01 SHA256-RSA-PKCS data rsa.sig
openssl dgst -sha256 -verify rsa.pem -signature rsa.sig data
if openssl dgst -sha256 -verify rsa.pem -signature rsa.sig other >/dev/null; then
    fail "OpenSSL accepted the signature for other data: the check checks nothing"
fi
{ printf '\x30\x31\x30\x0d\x06\x09\x60\x86\x48\x01\x65\x03\x04\x02\x01\x05\x00\x04\x20'; cat digest; } > digestinfo
sign 01 RSA-PKCS digestinfo raw.sig
openssl pkeyutl -verify -pubin -inkey rsa.pem -pkeyopt digest:sha256 -in digest -sigfile raw.sig
# RSA-PSS, salt 32: hash-and-sign, and CKM_RSA_PKCS_PSS over the digest.
pss=(--mgf MGF1-SHA256 --salt-len 32)
sign 01 SHA256-RSA-PKCS-PSS data pss.sig "${pss[@]}"
openssl dgst -sha256 -verify rsa.pem -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:32 -signature pss.sig data
sign 01 RSA-PKCS-PSS digest pss-raw.sig --hash-algorithm SHA256 "${pss[@]}"
openssl dgst -sha256 -verify rsa.pem -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:32 -signature pss-raw.sig data
# ECDSA P-256 (DER signatures, as OpenSSL reads them).
sign 02 ECDSA digest ec.sig --signature-format openssl
openssl dgst -sha256 -verify ec.pem -signature ec.sig data
sign 02 ECDSA-SHA256 data ec2.sig --signature-format openssl
openssl dgst -sha256 -verify ec.pem -signature ec2.sig data
if openssl dgst -sha256 -verify ec.pem -signature ec2.sig other >/dev/null; then
    fail "OpenSSL accepted the ECDSA signature for other data"
fi
# The SO re-initialises the token (C_InitToken: keys and user PIN gone, label kept) and sets a
# new user PIN; the old one opens nothing.
pkcs11-tool --module "$M" --token-label e2e --init-token --label e2e --so-pin 87654321 >/dev/null
"${tool[@]}" --login --login-type so --so-pin 87654321 --init-pin --pin 4321 >/dev/null
if "${user[@]}" -O >/dev/null 2>&1; then fail "the user PIN from before the re-initialisation still works"; fi
after=$("${tool[@]}" --login --pin 4321 -O)
if grep -q "Key Object" <<<"$after"; then fail "keys outlived the re-initialisation: $after"; fi
echo "e2e pkcs11-tool: token listed, RSA and EC keys made and listed, PKCS#1, PSS and ECDSA signatures verified by OpenSSL, token re-initialised"

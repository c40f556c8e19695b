# OpenDNSSEC 2.1 HSM tools (libhsm-bin): a conf.xml repository on the token; ods-hsmutil
# generates a key (CKA_ID of 16 bytes from C_GenerateRandom), lists it, runs its own test, and
# prints its DNSKEY; ods-hsmspeed signs from several threads on their own sessions with one
# key handle. Independently: a signature made with that key over a DigestInfo (as OpenDNSSEC
# does) verifies with OpenSSL against the public key taken from ods-hsmutil's DNSKEY.
. "$(dirname "$0")/common.sh"
need ods-hsmutil ods-hsmspeed openssl base64 od
sed -e "s|<Repository name=\"SoftHSM\">|<Repository name=\"ferrohsm\">|" \
    -e "s|<Module>.*</Module>|<Module>$M</Module>|" \
    -e "s|<TokenLabel>.*</TokenLabel>|<TokenLabel>e2e</TokenLabel>|" \
    -e "s|<PIN>.*</PIN>|<PIN>1234</PIN>|" /etc/opendnssec/conf.xml > "$WORK/conf.xml"
grep -q "<Module>$M</Module>" "$WORK/conf.xml" || { echo "FAIL: could not write conf.xml" >&2; exit 1; }
ods=(ods-hsmutil -c "$WORK/conf.xml")
gen=$("${ods[@]}" generate ferrohsm rsa 2048 2>&1)
id=$(grep -m1 -oE '[0-9a-f]{32}' <<<"$gen" || true)
[ -n "$id" ] || { echo "FAIL: ods-hsmutil generate: $gen" >&2; exit 1; }
"${ods[@]}" list ferrohsm 2>&1 | grep -q "$id" || { echo "FAIL: ods-hsmutil list does not show $id" >&2; exit 1; }
test_out=$("${ods[@]}" test ferrohsm 2>&1 || true)  # non-zero: the cases below fail
# Its test also tries RSA below 1024 bits (refused: CKR_KEY_SIZE_RANGE) and DSA, GOST and Ed448
# keys (not offered); every RSA key of 1024 bits and more, ECDSA P-256 and P-384 and Ed25519 keys
# must generate, and those it signs with must sign. (ods-hsmutil 2.1 prints "Signing (ECDSA/...)
# with key..." but signs nothing with its ECDSA keys; the signer scenario signs with them.)
for want in "Generating 2048-bit RSA key... OK" "Generating ECDSA Curve P-256 key... OK" \
    "Generating ECDSA Curve P-384 key... OK" "Generating ED25519 key... OK"; do
    grep -qF "$want" <<<"$test_out" || { echo "FAIL: ods-hsmutil test: no \"$want\": $test_out" >&2; exit 1; }
done
bad=$(grep -E "^(Signing|Extracting|Deleting)" <<<"$test_out" | grep -v "OK" || true)
[ -z "$bad" ] || { echo "FAIL: ods-hsmutil test: $bad" >&2; exit 1; }
speed=$(ods-hsmspeed -c "$WORK/conf.xml" -r ferrohsm -i 200 -s 2048 -t 4 2>&1)
grep -qiE "signatures per second|sig/s|signatures/s" <<<"$speed" || { echo "FAIL: ods-hsmspeed: $speed" >&2; exit 1; }
# The DNSKEY holds the token's public key (RFC 3110: exponent length, exponent, modulus).
dnskey=$("${ods[@]}" dnskey "$id" example.org 257 8 2>&1 | grep -m1 "DNSKEY" || true)
[ -n "$dnskey" ] || { echo "FAIL: ods-hsmutil dnskey printed nothing" >&2; exit 1; }
awk '{for (i = 8; i <= NF && $i !~ /^;/; i++) printf "%s", $i}' <<<"$dnskey" | base64 -d > "$WORK/rfc3110.bin"
# The public key, rebuilt from the DNSKEY (RFC 3110: exponent length, exponent, modulus).
hex=$(od -An -tx1 -v "$WORK/rfc3110.bin" | tr -d ' \n')
elen=$((16#${hex:0:2}))
exp=${hex:2:$((2 * elen))}
mod=${hex:$((2 + 2 * elen))}
printf 'asn1=SEQUENCE:pubkey\n[pubkey]\nn=INTEGER:0x%s\ne=INTEGER:0x%s\n' "$mod" "$exp" > "$WORK/rsa.conf"
openssl asn1parse -genconf "$WORK/rsa.conf" -out "$WORK/rsapub.der" -noout
openssl rsa -pubin -RSAPublicKey_in -inform DER -in "$WORK/rsapub.der" -out "$WORK/pub.pem" 2>/dev/null
# A PKCS#1 signature over a SHA-256 DigestInfo with that key, checked by OpenSSL.
echo "zone data" > "$WORK/data"
{ printf '\x30\x31\x30\x0d\x06\x09\x60\x86\x48\x01\x65\x03\x04\x02\x01\x05\x00\x04\x20'; openssl dgst -sha256 -binary "$WORK/data"; } > "$WORK/di"
pkcs11-tool --module "$M" --token-label e2e --login --pin 1234 --sign -m RSA-PKCS --id "$id" -i "$WORK/di" -o "$WORK/sig" >/dev/null
openssl dgst -sha256 -verify "$WORK/pub.pem" -signature "$WORK/sig" "$WORK/data"
echo "e2e opendnssec: key generated, listed, tested, DNSKEY and signature checked, hsmspeed ran"

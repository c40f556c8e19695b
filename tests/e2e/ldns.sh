# ldns-signzone (ldnsutils) with the libp11 engine: signs a zone with a token key; ldns-signzone
# exits 0 even when it could not sign, so the output is checked: RRSIGs present and
# ldns-verify-zone and dnssec-verify accept it.
. "$(dirname "$0")/common.sh"
need ldns-signzone ldns-verify-zone openssl
engine_conf "PIN = 1234"
keygen 04 zsk 2048
write_zone "$WORK/example.org.zone"
# Algorithm 8 = RSASHA256; the key id is the libp11 URI.
ldns-signzone -E pkcs11 -k "8,pkcs11:token=e2e;object=zsk;type=private" -o example.org \
    -f "$WORK/signed.zone" "$WORK/example.org.zone"
grep -q "RRSIG" "$WORK/signed.zone" || { echo "FAIL: the zone came out unsigned" >&2; exit 1; }
verify_zone "$WORK/signed.zone" example.org -z
echo "e2e ldns: zone signed with the token key and verified"

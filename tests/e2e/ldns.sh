# ldns-signzone (ldnsutils) with the libp11 engine: signs a zone with a token key; ldns-signzone
# exits 0 even when it could not sign, so the output is checked: RRSIGs present and
# ldns-verify-zone accepts it.
. "$(dirname "$0")/common.sh"
need ldns-signzone ldns-verify-zone openssl
engine=$(find /usr/lib -name pkcs11.so -path '*engines-3*' | head -1)
[ -n "$engine" ] || { echo "FAIL: the libp11 engine (libengine-pkcs11-openssl) is not installed" >&2; exit 1; }
cat > "$WORK/openssl.cnf" <<CNF
openssl_conf = openssl_init
[openssl_init]
engines = engine_section
[engine_section]
pkcs11 = pkcs11_section
[pkcs11_section]
engine_id = pkcs11
dynamic_path = $engine
MODULE_PATH = $M
PIN = 1234
init = 0
CNF
export OPENSSL_CONF="$WORK/openssl.cnf"
keygen 04 zsk 2048
cat > "$WORK/example.org.zone" <<ZONE
\$ORIGIN example.org.
\$TTL 3600
@   IN SOA ns1.example.org. hostmaster.example.org. 2026113001 7200 3600 1209600 3600
@   IN NS  ns1.example.org.
ns1 IN A   192.0.2.1
www IN A   192.0.2.80
ZONE
# Algorithm 8 = RSASHA256; the key id is the libp11 URI.
ldns-signzone -E pkcs11 -k "8,pkcs11:token=e2e;object=zsk;type=private" -o example.org \
    -f "$WORK/signed.zone" "$WORK/example.org.zone"
grep -q "RRSIG" "$WORK/signed.zone" || { echo "FAIL: the zone came out unsigned" >&2; exit 1; }
ldns-verify-zone "$WORK/signed.zone"
echo "e2e ldns: zone signed with the token key and verified"

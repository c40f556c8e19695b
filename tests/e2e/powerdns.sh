# PowerDNS Authoritative 4.7 (pdns-server, pdns-tools, pdns-backend-sqlite3): the module is
# registered with p11-kit (PowerDNS loads PKCS#11 modules through it by name); a key made on the
# token is assigned to one zone with `pdnsutil hsm assign`, another zone gets its key from
# `pdnsutil hsm create-key`, a third zone (example.com) is signed with an ECDSA P-256 token key
# (algorithm 13: PowerDNS hashes through C_Digest and signs with CKM_ECDSA); pdns_server signs
# all three live, and AXFRs over loopback are verified independently by ldns-verify-zone and
# dnssec-verify.
# Ed25519 (algorithm 15) is out of PowerDNS's PKCS#11 reach: pkcs11signers.cc (4.7) maps only
# algorithms 5, 7, 8, 10, 13 and 14 to mechanisms, and takes public keys of type CKK_RSA or
# CKK_EC only ("Cannot determine type for PCKS#11 public key" for CKK_EC_EDWARDS).
# (pdnsutil 4.7.3's `hsm create-key` writes past the end of its own attribute array in
# Pkcs11Token::GenerateKeyPair, as valgrind shows; with SoftHSM behind the same p11-kit
# registration it then aborts in free() ("munmap_chunk(): invalid pointer"), with ferrohsm it
# depends on the heap layout. The key is made either way; the scenario checks the key and the
# zone it signs.)
. "$(dirname "$0")/common.sh"
need pdnsutil pdns_server sqlite3 dig ldns-verify-zone
schema=/usr/share/doc/pdns-backend-sqlite3/schema.sqlite3.sql
[ -f "$schema" ] || { echo "FAIL: pdns-backend-sqlite3 is not installed" >&2; exit 1; }
mkdir -p "$WORK/pdns"
p11kit_register ferrohsm-pdns
modname=$P11KIT_MODULE_NAME
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -f "$P11KIT_MODULE_FILE"' EXIT
sqlite3 "$WORK/pdns/pdns.sqlite3" < "$schema"
port=$((20000 + $$ % 20000))
cat > "$WORK/pdns/pdns.conf" <<CONF
launch=gsqlite3
gsqlite3-database=$WORK/pdns/pdns.sqlite3
gsqlite3-dnssec=yes
local-address=127.0.0.1
local-port=$port
socket-dir=$WORK/pdns
guardian=no
daemon=no
disable-syslog=yes
allow-axfr-ips=127.0.0.0/8
CONF
# Every pdnsutil call goes through `pdns`: a pdnsutil killed by a signal (its heap bug, above,
# can strike any command that loaded the module) ends the scenario with the marker the test
# retries on, in a fresh directory; any other failure is the scenario's and fails at once.
exec 9>&2 # the marker reaches the test even from inside $(...)
pdns() {
    local out rc=0
    out=$(pdnsutil --config-dir="$WORK/pdns" "$@" 2>&1) || rc=$?
    if [ "$rc" -ge 128 ]; then
        echo "PDNSUTIL CRASHED: pdnsutil $* died by signal $((rc - 128)): $out" >&9
        exit 3
    fi
    printf '%s\n' "$out"
    return "$rc"
}
pdns create-zone example.org ns1.example.org >/dev/null
pdns add-record example.org www A 192.0.2.80 >/dev/null
pdns add-record example.org ns1 A 192.0.2.1 >/dev/null
keygen 06 pdnsksk 2048
out=$(pdns hsm assign example.org rsasha256 ksk "$modname" e2e 1234 pdnsksk 2>&1)
grep -q "assigned to example.org" <<<"$out" || { echo "FAIL: pdnsutil hsm assign: $out" >&2; exit 1; }
pdns rectify-zone example.org >/dev/null
show=$(pdns show-zone example.org 2>&1)
grep -q "DNSKEY" <<<"$show" || { echo "FAIL: pdnsutil does not see the token key: $show" >&2; exit 1; }
# The documented create-key flow on a second zone: assign a label, then let pdnsutil make the
# key pair on the token. pdnsutil 4.7.3 corrupts its own heap in this command (see above) and may
# abort on its way out, after the key is made: success is judged by the key on the token and the
# zone it signs, not by pdnsutil's exit status.
pdns create-zone example.net ns1.example.net >/dev/null
pdns add-record example.net www A 192.0.2.81 >/dev/null
out=$(pdns hsm assign example.net rsasha256 ksk "$modname" e2e 1234 pdnsnew 2>&1)
keyid=$(grep -oE "assigned to example.net with key id [0-9]+" <<<"$out" | grep -oE "[0-9]+$" || true)
[ -n "$keyid" ] || { echo "FAIL: pdnsutil hsm assign (create-key flow): $out" >&2; exit 1; }
# When the corruption kills it before it reaches the token (seen in CI: no output at all, the
# stdout buffer dies with the process), the command is run once more.
for attempt in 1 2; do
    out=$(pdnsutil --config-dir="$WORK/pdns" hsm create-key example.net "$keyid" 2048 2>&1) || echo "pdnsutil hsm create-key (attempt $attempt) exited with $?: $out"
    objs=$(pkcs11-tool --module "$M" --token-label e2e --login --pin 1234 -O)
    grep -q "label: *pdnsnew" <<<"$objs" && break
done
[ "$(grep -c "label: *pdnsnew" <<<"$objs")" -eq 2 ] || { echo "FAIL: pdnsutil hsm create-key made no key pair on the token: $out $objs" >&2; exit 1; }
pdns rectify-zone example.net >/dev/null
pdns create-zone example.com ns1.example.com >/dev/null
pdns add-record example.com www A 192.0.2.82 >/dev/null
keygen 07 pdnsec EC:prime256v1
out=$(pdns hsm assign example.com ecdsa256 ksk "$modname" e2e 1234 pdnsec 2>&1)
grep -q "assigned to example.com" <<<"$out" || { echo "FAIL: pdnsutil hsm assign (ECDSA): $out" >&2; exit 1; }
pdns rectify-zone example.com >/dev/null
pdns_server --config-dir="$WORK/pdns" >"$WORK/pdns/server.log" 2>&1 &
pid=$!
# Up to 60 s, however busy the machine.
for _ in $(seq 1 300); do
    dig @127.0.0.1 -p "$port" example.org SOA +short >/dev/null 2>&1 && break
    sleep 0.2
done
dig @127.0.0.1 -p "$port" example.org AXFR +dnssec +nocmd +nostats > "$WORK/axfr.zone"
grep -q "RRSIG" "$WORK/axfr.zone" || { echo "FAIL: no signatures in the AXFR: $(cat "$WORK/axfr.zone")" >&2; exit 1; }
verify_zone "$WORK/axfr.zone" example.org -z  # one KSK signs everything: no ZSK
dig @127.0.0.1 -p "$port" example.net AXFR +dnssec +nocmd +nostats > "$WORK/axfr-net.zone"
grep -q "RRSIG" "$WORK/axfr-net.zone" || { echo "FAIL: example.net unsigned: $(cat "$WORK/axfr-net.zone")" >&2; exit 1; }
verify_zone "$WORK/axfr-net.zone" example.net -z
dig @127.0.0.1 -p "$port" example.com AXFR +dnssec +nocmd +nostats > "$WORK/axfr-com.zone"
grep -qE "RRSIG[[:space:]]+SOA[[:space:]]+13[[:space:]]" "$WORK/axfr-com.zone" \
    || { echo "FAIL: example.com has no algorithm 13 signatures: $(cat "$WORK/axfr-com.zone")" >&2; exit 1; }
verify_zone "$WORK/axfr-com.zone" example.com -z
echo "e2e powerdns: RSA token keys assigned and created and an ECDSA P-256 key assigned with pdnsutil, live-signed zones verified"

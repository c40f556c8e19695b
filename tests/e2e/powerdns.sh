# PowerDNS Authoritative 4.7 (pdns-server, pdns-tools, pdns-backend-sqlite3): the module is
# registered with p11-kit (PowerDNS loads PKCS#11 modules through it by name), a key made on the
# token is assigned to the zone with `pdnsutil hsm assign`, pdns_server signs the zone live; an
# AXFR over loopback is verified independently by ldns-verify-zone and dnssec-verify.
# (`pdnsutil hsm create-key` is not used: pdnsutil 4.7.3 writes past the end of its own
# attribute array in Pkcs11Token::GenerateKeyPair, as valgrind shows, and then hands the
# module a template one attribute longer than it built; with SoftHSM behind the same p11-kit
# registration pdnsutil aborts in free() ("munmap_chunk(): invalid pointer"), with ferrohsm it
# depends on the heap layout.)
. "$(dirname "$0")/common.sh"
need pdnsutil pdns_server sqlite3 dig ldns-verify-zone
schema=/usr/share/doc/pdns-backend-sqlite3/schema.sqlite3.sql
[ -f "$schema" ] || { echo "FAIL: pdns-backend-sqlite3 is not installed" >&2; exit 1; }
if [ "$(id -u)" = 0 ]; then
    moddir=/etc/pkcs11/modules
    modname="ferrohsm-pdns-$$"
else
    export XDG_CONFIG_HOME="$WORK/config"
    moddir="$XDG_CONFIG_HOME/pkcs11/modules"
    modname=ferrohsm
fi
mkdir -p "$moddir" "$WORK/pdns"
sed "s|^module: .*|module: $M|" "$(dirname "$0")/../../p11-kit/ferrohsm.module" > "$moddir/$modname.module"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; [ "$(id -u)" = 0 ] && rm -f "$moddir/$modname.module"' EXIT
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
pdns=(pdnsutil --config-dir="$WORK/pdns")
"${pdns[@]}" create-zone example.org ns1.example.org >/dev/null
"${pdns[@]}" add-record example.org www A 192.0.2.80 >/dev/null
"${pdns[@]}" add-record example.org ns1 A 192.0.2.1 >/dev/null
keygen 06 pdnsksk 2048
out=$("${pdns[@]}" hsm assign example.org rsasha256 ksk "$modname" e2e 1234 pdnsksk 2>&1)
grep -q "assigned to example.org" <<<"$out" || { echo "FAIL: pdnsutil hsm assign: $out" >&2; exit 1; }
"${pdns[@]}" rectify-zone example.org >/dev/null
show=$("${pdns[@]}" show-zone example.org 2>&1)
grep -q "DNSKEY" <<<"$show" || { echo "FAIL: pdnsutil does not see the token key: $show" >&2; exit 1; }
pdns_server --config-dir="$WORK/pdns" >"$WORK/pdns/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do
    dig @127.0.0.1 -p "$port" example.org SOA +short >/dev/null 2>&1 && break
    sleep 0.2
done
dig @127.0.0.1 -p "$port" example.org AXFR +dnssec +nocmd +nostats > "$WORK/axfr.zone"
grep -q "RRSIG" "$WORK/axfr.zone" || { echo "FAIL: no signatures in the AXFR: $(cat "$WORK/axfr.zone")" >&2; exit 1; }
verify_zone "$WORK/axfr.zone" example.org -z  # one KSK signs everything: no ZSK
echo "e2e powerdns: token key assigned with pdnsutil, live-signed zone verified"

# Knot DNS 3.2 (knot, knot-dnssecutils): a PKCS#11 keystore on the token, keys made by keymgr
# (Knot passes CKF_LIBRARY_CANT_CREATE_OS_THREADS, templates without class or key type, 20-byte
# CKA_IDs, and asks C_Sign for lengths first), the zone signed by kzonesign; verified
# independently by ldns-verify-zone and dnssec-verify.
. "$(dirname "$0")/common.sh"
need keymgr kzonesign ldns-verify-zone
mkdir -p "$WORK/knot/db" "$WORK/knot/run" "$WORK/knot/zones" "$WORK/knot/signed"
cat > "$WORK/knot/knot.conf" <<CONF
server:
    rundir: "$WORK/knot/run"
database:
    storage: "$WORK/knot/db"
keystore:
  - id: token
    backend: pkcs11
    config: "pkcs11:token=e2e;pin-value=1234 $M"
policy:
  - id: rsa
    algorithm: rsasha256
    ksk-size: 2048
    zsk-size: 1024
    keystore: token
    manual: on
zone:
  - domain: example.org
    storage: "$WORK/knot/zones"
    file: "example.org.zone"
    dnssec-signing: on
    dnssec-policy: rsa
CONF
write_zone "$WORK/knot/zones/example.org.zone"
conf=(-c "$WORK/knot/knot.conf")
keymgr "${conf[@]}" example.org generate algorithm=rsasha256 ksk=yes zsk=no size=2048 >/dev/null
keymgr "${conf[@]}" example.org generate algorithm=rsasha256 ksk=no zsk=yes size=1024 >/dev/null
keys=$(keymgr "${conf[@]}" example.org list)
[ "$(echo "$keys" | grep -c RSASHA256)" -ge 2 ] || { echo "FAIL: keymgr did not make two keys: $keys" >&2; exit 1; }
# The keys live on the token, not in Knot's database.
pkcs11-tool --module "$M" --token-label e2e --login --pin 1234 -O --type privkey | grep -c "Private Key Object" | grep -q 2
kzonesign "${conf[@]}" -o "$WORK/knot/signed" example.org
signed="$WORK/knot/signed/example.org.zone"
grep -q "RRSIG" "$signed" || { echo "FAIL: the zone came out unsigned" >&2; exit 1; }
verify_zone "$signed" example.org
echo "e2e knot: keys on the token, zone signed by kzonesign and verified"

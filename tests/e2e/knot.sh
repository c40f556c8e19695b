# Knot DNS 3.2 (knot, knot-dnssecutils): a PKCS#11 keystore on the token, keys made by keymgr
# (Knot passes CKF_LIBRARY_CANT_CREATE_OS_THREADS, templates without class or key type, 20-byte
# CKA_IDs, and asks C_Sign for lengths first), the zone signed by kzonesign; verified
# independently by ldns-verify-zone and dnssec-verify. Two more zones in the same set-up are
# signed with one combined key each: example.com with ECDSA P-256 (algorithm 13, made by keymgr)
# and example.net with Ed25519 (algorithm 15, made by pkcs11-tool and imported: see below).
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
  - id: ecdsa
    algorithm: ecdsap256sha256
    single-type-signing: on
    keystore: token
    manual: on
  - id: ed25519
    algorithm: ed25519
    single-type-signing: on
    keystore: token
    manual: on
zone:
  - domain: example.org
    storage: "$WORK/knot/zones"
    file: "example.org.zone"
    dnssec-signing: on
    dnssec-policy: rsa
  - domain: example.com
    storage: "$WORK/knot/zones"
    file: "example.com.zone"
    dnssec-signing: on
    dnssec-policy: ecdsa
  - domain: example.net
    storage: "$WORK/knot/zones"
    file: "example.net.zone"
    dnssec-signing: on
    dnssec-policy: ed25519
CONF
for z in example.org example.com example.net; do write_zone "$WORK/knot/zones/$z.zone" "$z"; done
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
# The EC zones: one CSK each (KSK and ZSK in one key, SEP flag set), on the token.
ec_zone() { # zone DNSKEY-algorithm-number
    kzonesign "${conf[@]}" -o "$WORK/knot/signed" "$1"
    local signed="$WORK/knot/signed/$1.zone"
    grep -qE "RRSIG[[:space:]]+SOA[[:space:]]+$2[[:space:]]" "$signed" \
        || { echo "FAIL: $1 has no algorithm $2 signatures: $(cat "$signed")" >&2; exit 1; }
    verify_zone "$signed" "$1" -z # one combined key: no key without the SEP flag
}
keymgr "${conf[@]}" example.com generate algorithm=ecdsap256sha256 ksk=yes zsk=yes >/dev/null
ec_zone example.com 13
# Knot cannot make an Ed25519 key on a token: GnuTLS 3.7 (its PKCS#11 layer) calls
# C_GenerateKeyPair with CKM_EDDSA, the signing mechanism, instead of
# CKM_EC_EDWARDS_KEY_PAIR_GEN, and SoftHSM refuses it the same way (CKR_MECHANISM_INVALID). The
# key is made with pkcs11-tool and given to Knot with `keymgr import-pkcs11`; Knot signs with it.
edid=$(openssl rand -hex 20)
keygen "$edid" knoted EC:edwards25519
keymgr "${conf[@]}" example.net import-pkcs11 "$edid" algorithm=ed25519 ksk=yes zsk=yes >/dev/null
ec_zone example.net 15
pkcs11-tool --module "$M" --token-label e2e --login --pin 1234 -O --type privkey | grep -c "Private Key Object" | grep -qx 4 \
    || { echo "FAIL: the EC keys are not on the token" >&2; exit 1; }
echo "e2e knot: keys on the token, zones signed by kzonesign with algorithms 8, 13 and 15 and verified"

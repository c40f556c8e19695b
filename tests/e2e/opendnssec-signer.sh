# OpenDNSSEC 2.1 enforcer and signer daemons (opendnssec-enforcer-sqlite3, opendnssec-signer)
# on the token: the enforcer makes a KSK and a ZSK on the token for each zone, the signer signs
# the zones with them from its worker threads: example.org under the "lab" policy (RSA,
# algorithm 8), example.com and example.net under copies of it with ECDSA P-256 (algorithm 13)
# and Ed25519 (algorithm 15) keys. Independently: every key is on the token (pkcs11-tool lists
# their CKA_IDs) and each signed zone passes ldns-verify-zone and dnssec-verify.
. "$(dirname "$0")/common.sh"
need ods-enforcerd ods-enforcer ods-signerd ods-signer sqlite3 pkcs11-tool ldns-verify-zone
mkdir -p "$WORK/ods/enforcer" "$WORK/ods/signer" "$WORK/ods/run"
# The signer's control socket has no configuration element: it is /run/opendnssec/engine.sock.
mkdir -p /run/opendnssec
cat > "$WORK/ods/conf.xml" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<Configuration>
  <RepositoryList>
    <Repository name="ferrohsm">
      <Module>$M</Module>
      <TokenLabel>e2e</TokenLabel>
      <PIN>1234</PIN>
    </Repository>
  </RepositoryList>
  <Common>
    <Logging><Verbosity>3</Verbosity></Logging>
    <PolicyFile>$WORK/ods/kasp.xml</PolicyFile>
    <ZoneListFile>$WORK/ods/zonelist.xml</ZoneListFile>
  </Common>
  <Enforcer>
    <Datastore><SQLite>$WORK/ods/kasp.db</SQLite></Datastore>
    <AutomaticKeyGenerationPeriod>P1M</AutomaticKeyGenerationPeriod>
    <PidFile>$WORK/ods/run/enforcerd.pid</PidFile>
    <SocketFile>$WORK/ods/run/enforcer.sock</SocketFile>
    <WorkingDirectory>$WORK/ods/enforcer</WorkingDirectory>
  </Enforcer>
  <Signer>
    <WorkingDirectory>$WORK/ods/signer</WorkingDirectory>
    <WorkerThreads>4</WorkerThreads>
    <SignerThreads>4</SignerThreads>
  </Signer>
</Configuration>
XML
sed -e 's|<Repository>SoftHSM</Repository>|<Repository>ferrohsm</Repository>|' /usr/share/opendnssec/kasp.xml > "$WORK/ods/kasp.xml"
grep -q "<Policy name=\"lab\">" "$WORK/ods/kasp.xml" || { echo "FAIL: /usr/share/opendnssec/kasp.xml (opendnssec-common) has no lab policy" >&2; exit 1; }
# lab13 and lab15: the lab policy with both keys of another algorithm (and length, which
# OpenDNSSEC checks against the curve). Their ZSKs live a month, not 4 hours: the enforcer makes
# every key a policy needs for its AutomaticKeyGenerationPeriod (a month) up front, 189 per
# policy with lab's lifetimes, which would add 9 s to the scenario for nothing more.
lab=$(sed -n '/<Policy name="lab">/,/<\/Policy>/p' "$WORK/ods/kasp.xml")
ec_policy() { # name algorithm length
    sed -e "s|<Policy name=\"lab\">|<Policy name=\"$1\">|" \
        -e "s|<Algorithm length=\"[0-9]*\">8</Algorithm>|<Algorithm length=\"$3\">$2</Algorithm>|" \
        -e "s|<Lifetime>PT4H</Lifetime>|<Lifetime>P1M</Lifetime>|" <<<"$lab"
}
{
    sed '/<\/KASP>/d' "$WORK/ods/kasp.xml"
    ec_policy lab13 13 256
    ec_policy lab15 15 256
    echo "</KASP>"
} > "$WORK/ods/kasp-ec.xml"
mv "$WORK/ods/kasp-ec.xml" "$WORK/ods/kasp.xml"
[ "$(grep -c "<Algorithm length=\"256\">1[35]</Algorithm>" "$WORK/ods/kasp.xml")" -eq 4 ] \
    || { echo "FAIL: could not write the EC policies" >&2; exit 1; }
printf '<?xml version="1.0" encoding="UTF-8"?>\n<ZoneList>\n</ZoneList>\n' > "$WORK/ods/zonelist.xml"
# What ods-enforcer-db-setup does, for a database outside /etc/opendnssec/conf.xml's reach.
sqlite3 "$WORK/ods/kasp.db" < /usr/share/opendnssec/schema.sqlite
sqlite3 "$WORK/ods/kasp.db" "INSERT INTO databaseVersion (version) VALUES (1)"
for z in example.org example.com example.net; do write_zone "$WORK/ods/$z" "$z"; done
enforcer=(bounded 60 ods-enforcer -s "$WORK/ods/run/enforcer.sock")
# Both daemons stay in the foreground (-d), children of this script: their logs go to the files
# below instead of an absent syslog, a hang anywhere shows their stacks (DAEMONS, see bounded),
# and whatever happens they end with the scenario.
DAEMONS=""
stop_daemons() {
    bounded 30 ods-signer stop >/dev/null 2>&1 || true
    "${enforcer[@]}" stop >/dev/null 2>&1 || true
    stop_pids 10 $DAEMONS
}
trap stop_daemons EXIT
wait_for() { # description test...: up to 60 s, however busy the machine
    local what=$1
    shift
    for _ in $(seq 1 300); do
        "$@" && return
        sleep 0.2
    done
    echo "FAIL: $what within 60 s; enforcer and signer logs:" >&2
    cat "$WORK/ods/enforcerd.log" "$WORK/ods/signerd.log" >&2 2>/dev/null || true
    exit 1
}
ods-enforcerd -d -c "$WORK/ods/conf.xml" >"$WORK/ods/enforcerd.log" 2>&1 &
DAEMONS=$!
wait_for "ods-enforcerd did not open its socket" test -S "$WORK/ods/run/enforcer.sock"
"${enforcer[@]}" policy import >/dev/null
zones=(example.org:lab:8 example.com:lab13:13 example.net:lab15:15)
for spec in "${zones[@]}"; do
    IFS=: read -r zone policy _ <<<"$spec"
    "${enforcer[@]}" zone add --zone "$zone" --policy "$policy" --input "$WORK/ods/$zone" \
        --output "$WORK/ods/$zone.signed" --signerconf "$WORK/ods/$zone.signconf.xml" >/dev/null
done
# The signer starts once the enforcer has written its zone list and a signer configuration for
# every zone, and reads them all at start. A running signer re-reads the zone list only when
# the file's modification time (in seconds) has moved past its last read: the third of three
# zones added within one second was never signed ("Zone list has not changed").
all_signconfs() {
    local spec zone
    for spec in "${zones[@]}"; do
        IFS=: read -r zone _ _ <<<"$spec"
        [ -s "$WORK/ods/$zone.signconf.xml" ] && grep -qs "\"$zone\"" "$WORK/ods/enforcer/zones.xml" || return 1
    done
}
wait_for "the enforcer wrote no zone list or signer configuration for every zone" all_signconfs
# A socket and pid file left by a signer that is gone (a killed run) are removed: the wait
# below would take the old socket for the new signer's, and ods-signerd refuses to start while
# the pid file names a live process, which after pid reuse may be any process.
if ! pgrep -x ods-signerd >/dev/null; then
    rm -f /run/opendnssec/engine.sock /run/opendnssec/signerd.pid
fi
ods-signerd -d -c "$WORK/ods/conf.xml" >"$WORK/ods/signerd.log" 2>&1 &
DAEMONS="$DAEMONS $!"
wait_for "ods-signerd did not open its socket" test -S /run/opendnssec/engine.sock
# The signer works on the zones in turn: up to 180 s in all for the three on a busy machine
# (it stops waiting as soon as they are signed). A zone is done when a snapshot of its output
# has the SOA's and the DNSKEY set's signatures and passes ldns-verify-zone: the signer
# rewrites the file as keys become active, so the first RRSIGs, or a size that held still for
# 0.2 s, were seen twice as a file whose DNSKEY set was not yet signed ("no signatures for
# example.org. DNSKEY"). The checks below read that verified snapshot.
declare -A snapshot_ok
for _ in $(seq 1 900); do
    done_zones=0
    for spec in "${zones[@]}"; do
        IFS=: read -r zone _ _ <<<"$spec"
        f="$WORK/ods/$zone.signed"
        if [ -z "${snapshot_ok[$zone]:-}" ] && grep -qsE "RRSIG[[:space:]]+SOA[[:space:]]" "$f" \
            && grep -qsE "RRSIG[[:space:]]+DNSKEY[[:space:]]" "$f"; then
            cp "$f" "$f.snapshot" && ldns-verify-zone "$f.snapshot" >/dev/null 2>&1 && snapshot_ok[$zone]=1
        fi
        [ -n "${snapshot_ok[$zone]:-}" ] && done_zones=$((done_zones + 1))
    done
    [ "$done_zones" -eq "${#zones[@]}" ] && break
    sleep 0.2
done
listed=$(bounded 60 pkcs11-tool --module "$M" --token-label e2e --login --pin 1234 -O --type privkey)
keys=$("${enforcer[@]}" key list --verbose 2>&1)
for spec in "${zones[@]}"; do
    IFS=: read -r zone _ alg <<<"$spec"
    signed="$WORK/ods/$zone.signed"
    # The verified snapshot, or the file as it is if none verified (its errors are then shown).
    [ -n "${snapshot_ok[$zone]:-}" ] && signed="$signed.snapshot"
    grep -qE "RRSIG[[:space:]]+SOA[[:space:]]+$alg[[:space:]]" "$signed" 2>/dev/null || {
        echo "FAIL: OpenDNSSEC did not sign $zone with algorithm $alg; enforcer and signer logs:" >&2
        cat "$WORK/ods/enforcerd.log" "$WORK/ods/signerd.log" >&2
        echo "$keys" >&2
        exit 1
    }
    # The enforcer's keys (KSK and ZSK) are objects on the token with the CKA_IDs it reports.
    ids=$(grep -E "^$zone +(KSK|ZSK)" <<<"$keys" | grep -oE '[0-9a-f]{32}' || true)
    [ "$(wc -w <<<"$ids")" -eq 2 ] || { echo "FAIL: expected a KSK and a ZSK for $zone: $keys" >&2; exit 1; }
    for id in $ids; do
        grep -q "ID:.*$id" <<<"$listed" || { echo "FAIL: key $id of $zone is not on the token: $listed" >&2; exit 1; }
    done
    verify_zone "$signed" "$zone"
done
echo "e2e opendnssec-signer: enforcer made a KSK and a ZSK on the token per zone, signer signed zones with algorithms 8, 13 and 15, verified"

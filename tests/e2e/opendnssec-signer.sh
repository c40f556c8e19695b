# OpenDNSSEC 2.1 enforcer and signer daemons (opendnssec-enforcer-sqlite3, opendnssec-signer)
# on the token: the enforcer makes a KSK and a ZSK on the token for a zone under the "lab"
# policy, the signer signs the zone with them from its worker threads. Independently: both
# keys are on the token (pkcs11-tool lists their CKA_IDs) and the signed zone passes
# ldns-verify-zone and dnssec-verify.
. "$(dirname "$0")/common.sh"
need ods-enforcerd ods-enforcer ods-signerd ods-signer sqlite3 pkcs11-tool
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
printf '<?xml version="1.0" encoding="UTF-8"?>\n<ZoneList>\n</ZoneList>\n' > "$WORK/ods/zonelist.xml"
# What ods-enforcer-db-setup does, for a database outside /etc/opendnssec/conf.xml's reach.
sqlite3 "$WORK/ods/kasp.db" < /usr/share/opendnssec/schema.sqlite
sqlite3 "$WORK/ods/kasp.db" "INSERT INTO databaseVersion (version) VALUES (1)"
write_zone "$WORK/ods/example.org"
enforcer=(ods-enforcer -s "$WORK/ods/run/enforcer.sock")
stop_daemons() {
    ods-signer stop >/dev/null 2>&1 || true
    "${enforcer[@]}" stop >/dev/null 2>&1 || true
}
trap stop_daemons EXIT
ods-enforcerd -c "$WORK/ods/conf.xml" >"$WORK/ods/enforcerd.log" 2>&1
ods-signerd -c "$WORK/ods/conf.xml" >"$WORK/ods/signerd.log" 2>&1
for _ in $(seq 1 50); do
    [ -S "$WORK/ods/run/enforcer.sock" ] && [ -S /run/opendnssec/engine.sock ] && break
    sleep 0.2
done
"${enforcer[@]}" policy import >/dev/null
"${enforcer[@]}" zone add --zone example.org --policy lab --input "$WORK/ods/example.org" \
    --output "$WORK/ods/example.org.signed" --signerconf "$WORK/ods/example.org.signconf.xml" >/dev/null
signed="$WORK/ods/example.org.signed"
for _ in $(seq 1 150); do
    [ -s "$signed" ] && grep -q "RRSIG" "$signed" && break
    sleep 0.2
done
grep -q "RRSIG" "$signed" 2>/dev/null || {
    echo "FAIL: OpenDNSSEC did not sign the zone; enforcer and signer logs:" >&2
    cat "$WORK/ods/enforcerd.log" "$WORK/ods/signerd.log" >&2
    "${enforcer[@]}" key list --verbose >&2 || true
    exit 1
}
# The enforcer's keys (KSK and ZSK) are objects on the token with the CKA_IDs it reports.
keys=$("${enforcer[@]}" key list --verbose 2>&1)
ids=$(grep -E "^example.org +(KSK|ZSK)" <<<"$keys" | grep -oE '[0-9a-f]{32}' || true)
[ "$(wc -w <<<"$ids")" -eq 2 ] || { echo "FAIL: expected a KSK and a ZSK: $keys" >&2; exit 1; }
listed=$(pkcs11-tool --module "$M" --token-label e2e --login --pin 1234 -O --type privkey)
for id in $ids; do
    grep -q "ID:.*$id" <<<"$listed" || { echo "FAIL: key $id is not on the token: $listed" >&2; exit 1; }
done
verify_zone "$signed" example.org
echo "e2e opendnssec-signer: enforcer made a KSK and a ZSK on the token, signer signed the zone, verified"

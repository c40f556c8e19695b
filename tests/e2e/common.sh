# Shared set-up for the e2e scenarios: a fresh token "e2e" (SO PIN 87654321, user PIN 1234) in
# the scenario's own store. Expects FERROHSM_MODULE, FERROHSM_UTIL and WORK.
# With FERROHSM_E2E_SYSTEM=1 (packaging/test-installed) the scenario runs on the installed
# package instead: the system-wide store of /etc/ferrohsm/ferrohsm.toml, where the caller made
# the token "e2e", and the package's p11-kit registration "ferrohsm".
# With FERROHSM_E2E_REMOTE=1 the module is a client of ferrohsm-server (see below).
set -euo pipefail
need() {
    for c in "$@"; do
        command -v "$c" >/dev/null || { echo "FAIL: $c is not installed (see .ci/run)" >&2; exit 1; }
    done
}
M=$FERROHSM_MODULE
if [ -n "${FERROHSM_E2E_REMOTE:-}" ]; then
    # Through ferrohsm-server (tests/e2e.rs, remote_scenario): the test made the token "e2e" on
    # the server's side and FERROHSM_CONF holds only the module's [remote] section.
    :
elif [ -z "${FERROHSM_E2E_SYSTEM:-}" ]; then
    printf '[store]\npath = "%s/store"\n[pin]\nkdf_memory_kib = 1024\nkdf_passes = 1\n' "$WORK" > "$WORK/ferrohsm.toml"
    export FERROHSM_CONF="$WORK/ferrohsm.toml"
    "$FERROHSM_UTIL" init-token --free --label e2e --so-pin 87654321 --pin 1234 >/dev/null
fi
# A hang becomes a failure that shows its cause: runs a command for at most $1 seconds; past
# that, prints the stacks of the command and of the scenario's daemons ($DAEMONS, pids) and
# fails with 124, as timeout(1) does.
bounded() { # seconds command...
    local limit=$1 pid ticks=0
    shift
    "$@" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$ticks" -ge $((limit * 10)) ]; then
            echo "FAIL: still running after ${limit} s: $*" >&2
            stacks "$pid" ${DAEMONS:-} >&2
            kill_tree "$pid"
            wait "$pid" 2>/dev/null || true
            return 124
        fi
        sleep 0.1
        ticks=$((ticks + 1))
    done
    wait "$pid"
}
stacks() { # pid...: every thread's stack (gdb is in .ci/run's packages)
    local p
    for p in "$@"; do
        [ -d "/proc/$p" ] || continue
        echo "--- stacks of $p: $(tr '\0' ' ' <"/proc/$p/cmdline")"
        timeout 60 gdb -p "$p" -batch -ex "thread apply all bt" 2>&1 | grep -E '^(Thread|#)' | head -300
    done
}
kill_tree() { # pid: the process and all its descendants (which may hold the caller's pipes)
    local child
    kill -STOP "$1" 2>/dev/null || return 0
    for child in $(ps -o pid= --ppid "$1"); do kill_tree "$child"; done
    kill -9 "$1" 2>/dev/null || true
}
stop_pids() { # seconds pid...: waits that long for the processes to end after they were asked to, then kills them
    local limit=$1 p ticks=0
    shift
    for p in "$@"; do
        while kill -0 "$p" 2>/dev/null && [ "$ticks" -lt $((limit * 10)) ]; do
            sleep 0.1
            ticks=$((ticks + 1))
        done
        if kill -0 "$p" 2>/dev/null; then
            echo "process $p did not stop when asked; its stacks, then SIGKILL:" >&2
            stacks "$p" >&2
            kill_tree "$p"
        fi
    done
}
keygen() { # id label bits|key-type (2048 is RSA-2048; EC:prime256v1, EC:edwards25519 as pkcs11-tool names them)
    local type=$3
    [[ $type == *:* ]] || type="rsa:$type"
    pkcs11-tool --module "$M" --token-label e2e --login --pin 1234 --keypairgen --key-type "$type" \
        --id "$1" --label "$2" >/dev/null
}
export_pub() { # id out.pem
    local obj params point alg bits
    # pkcs11-tool -O lists every object whatever --id says: the block with this CKA_ID.
    obj=$(pkcs11-tool --module "$M" --token-label e2e -O --type pubkey | awk -v id="$1" '
        /^Public Key Object/ { type = $0; params = ""; point = "" }
        /EC_PARAMS:/ { params = $2 }
        /EC_POINT:/ { point = $2 }
        $1 == "ID:" && $2 == id { print type "|" params "|" point; exit }')
    if [[ $obj == "Public Key Object; EC "* ]]; then
        # pkcs11-tool 0.23's --read-object reads past the end of a buffer when it rebuilds an ECDSA
        # public key (valgrind shows it with SoftHSM too) and fails or not with the heap's layout
        # ("cannot create EVP_PKEY"). The SubjectPublicKeyInfo is built here instead, from
        # CKA_EC_PARAMS and CKA_EC_POINT (P-256 and P-384: every DER length fits in one byte).
        IFS='|' read -r _ params point <<<"$obj"
        point=${point:4} # the OCTET STRING's tag and length
        alg=$(der 30 "06072a8648ce3d0201$params")
        bits=$(der 03 "00$point")
        printf "$(der 30 "$alg$bits" | sed 's/../\\x&/g')" > "$WORK/pub.der"
    else
        pkcs11-tool --module "$M" --token-label e2e --read-object --type pubkey --id "$1" -o "$WORK/pub.der" >/dev/null
    fi
    # (DER, or PEM as pkcs11-tool writes Ed25519 keys: OpenSSL tells them apart.)
    openssl pkey -pubin -in "$WORK/pub.der" -out "$2"
}
der() { # tag content-hex: a DER element with a short-form length
    local n=$((${#2} / 2))
    [ "$n" -lt 128 ] || { echo "FAIL: der: $n bytes need a long-form length" >&2; exit 1; }
    printf '%s%02x%s' "$1" "$n" "$2"
}
# OPENSSL_CONF loading the libp11 engine for this module; extra lines (e.g. "PIN = 1234") follow.
engine_conf() {
    local engine
    engine=$(find /usr/lib -name pkcs11.so -path '*engines-3*' | head -1)
    [ -n "$engine" ] || { echo "FAIL: the libp11 engine (libengine-pkcs11-openssl) is not installed" >&2; exit 1; }
    {
        printf 'openssl_conf = openssl_init\n[openssl_init]\nengines = engine_section\n'
        printf '[engine_section]\npkcs11 = pkcs11_section\n[pkcs11_section]\nengine_id = pkcs11\n'
        printf 'dynamic_path = %s\nMODULE_PATH = %s\ninit = 0\n' "$engine" "$M"
        for line in "$@"; do printf '%s\n' "$line"; done
    } > "$WORK/openssl.cnf"
    export OPENSSL_CONF="$WORK/openssl.cnf"
}
# A small unsigned zone in file $1: example.org, or the origin $2 (a second zone signed with
# another algorithm in the same set-up).
write_zone() { # file [origin]
    local origin=${2:-example.org}
    cat > "$1" <<ZONE
\$ORIGIN $origin.
\$TTL 3600
@   IN SOA ns1.$origin. hostmaster.$origin. 2026113001 7200 3600 1209600 3600
@   IN NS  ns1.$origin.
ns1 IN A   192.0.2.1
www IN A   192.0.2.80
ZONE
}
# Two independent validators check a signed zone: ldns-verify-zone (ldnsutils) and BIND's
# dnssec-verify (bind9-utils). Extra arguments go to dnssec-verify (e.g. -z when the zone has
# no key with the SEP flag).
verify_zone() { # signed-zone-file origin [dnssec-verify options]
    local file=$1 origin=$2
    shift 2
    need ldns-verify-zone dnssec-verify
    ldns-verify-zone "$file"
    # Without the scenario's OPENSSL_CONF: BIND's crypto must not load the token's engine.
    env -u OPENSSL_CONF dnssec-verify "$@" -o "$origin" "$file"
}
# Registers this build with p11-kit under a name of its own ($P11KIT_MODULE_NAME), from the
# shipped .module file. p11-kit reads user configuration only for non-root users, so as root
# (CI) the file goes to the system directory, which every process on the machine reads: such
# scenarios hold a machine-wide lock for their whole run, because p11-kit merges two
# registrations of one library under the first name it reads, and the other scenario's name
# then finds no module. Stale registrations of killed scenarios are removed; the caller removes
# "$P11KIT_MODULE_FILE" on exit.
P11KIT_E2E_MARKER="# registered by a ferrohsm e2e scenario"
p11kit_register() { # base-name
    local moddir name
    if [ -n "${FERROHSM_E2E_SYSTEM:-}" ]; then
        # The package's /usr/share/p11-kit/modules/ferrohsm.module, which must not be removed.
        P11KIT_MODULE_NAME=ferrohsm
        P11KIT_MODULE_FILE=
        return
    fi
    if [ "$(id -u)" = 0 ]; then
        exec 9>/tmp/ferrohsm-e2e-p11-kit.lock
        flock 9
        moddir=/etc/pkcs11/modules
        name="$1-$$"
        # A registration left by a scenario that was killed would shadow ours the same way.
        # Only files carrying the scenarios' marker line are ours to remove.
        local f
        for f in "$moddir"/*.module; do
            grep -qx "$P11KIT_E2E_MARKER" "$f" 2>/dev/null || continue
            kill -0 "$(basename "$f" .module | sed 's/.*-//')" 2>/dev/null || rm -f "$f"
        done
    else
        export XDG_CONFIG_HOME="$WORK/config"
        moddir="$XDG_CONFIG_HOME/pkcs11/modules"
        name=$1
    fi
    mkdir -p "$moddir"
    P11KIT_MODULE_FILE="$moddir/$name.module"
    {
        echo "$P11KIT_E2E_MARKER"
        sed "s|^module: .*|module: $M|" "$(dirname "${BASH_SOURCE[0]}")/../../p11-kit/ferrohsm.module"
    } > "$P11KIT_MODULE_FILE"
    P11KIT_MODULE_NAME=$name
}

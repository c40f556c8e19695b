# p11-kit remoting: `p11-kit server` exports the ferrohsm token on a unix socket, and
# p11-kit-client.so gives it to pkcs11-tool in another process: list, key generation, PKCS#1 and
# PSS signatures through the socket. Independently: OpenSSL verifies the signatures with the
# public key read from the module directly (not through the socket).
# (p11-kit 0.24's RPC carries PSS parameters for CKM_RSA_PKCS_PSS but not for the hash-and-sign
# PSS mechanisms, and a zero-length C_GenerateRandom fails on the way back to the client; SoftHSM
# behind the same server fails the same two calls, so neither is used here.)
. "$(dirname "$0")/common.sh"
need p11-kit pkcs11-tool openssl
client=$(find /usr/lib -name p11-kit-client.so | head -1)
[ -n "$client" ] || { echo "FAIL: p11-kit-client.so is not installed (p11-kit-modules)" >&2; exit 1; }
sock="$WORK/p11-kit.sock"
p11-kit server --foreground --provider "$M" --name "$sock" "pkcs11:token=e2e" > "$WORK/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
# Up to 60 s, however busy the machine.
for _ in $(seq 1 600); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "FAIL: p11-kit server did not start: $(cat "$WORK/server.log")" >&2; exit 1; }
export P11_KIT_SERVER_ADDRESS="unix:path=$sock"
remote=(pkcs11-tool --module "$client" --token-label e2e)
slots=$("${remote[@]}" -L)
grep -q "token label *: e2e" <<<"$slots" || { echo "FAIL: the remote token is not listed: $slots" >&2; exit 1; }
"${remote[@]}" --login --pin 1234 --keypairgen --key-type rsa:2048 --id 07 --label remote >/dev/null
export_pub 07 "$WORK/pub.pem"   # read through the module itself, not the socket
echo "signed through p11-kit remoting" > "$WORK/data"
"${remote[@]}" --login --pin 1234 --sign -m SHA256-RSA-PKCS --id 07 -i "$WORK/data" -o "$WORK/sig" >/dev/null
openssl dgst -sha256 -verify "$WORK/pub.pem" -signature "$WORK/sig" "$WORK/data"
openssl dgst -sha256 -binary "$WORK/data" > "$WORK/digest"
"${remote[@]}" --login --pin 1234 --sign -m RSA-PKCS-PSS --hash-algorithm SHA256 --mgf MGF1-SHA256 \
    --salt-len 32 --id 07 -i "$WORK/digest" -o "$WORK/pss" >/dev/null
openssl dgst -sha256 -verify "$WORK/pub.pem" -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:32 \
    -signature "$WORK/pss" "$WORK/data"
echo "e2e p11-kit-remote: token served over a socket, key made and PKCS#1/PSS signatures verified"

# p11-kit: the shipped .module file (with this build's path) registers ferrohsm; p11-kit lists
# it with its token, and pkcs11-tool signs through p11-kit's proxy module.
. "$(dirname "$0")/common.sh"
need p11-kit pkcs11-tool openssl
proxy=$(find /usr/lib -name p11-kit-proxy.so | head -1)
[ -n "$proxy" ] || { echo "FAIL: p11-kit-proxy.so is not installed" >&2; exit 1; }
p11kit_register ferrohsm-e2e
trap 'rm -f "$P11KIT_MODULE_FILE"' EXIT
out=$(p11-kit list-modules)
grep -q "$P11KIT_MODULE_NAME" <<<"$out" || { echo "FAIL: p11-kit does not list ferrohsm: $out" >&2; exit 1; }
grep -q "e2e" <<<"$out" || { echo "FAIL: p11-kit does not show the token: $out" >&2; exit 1; }
keygen 03 kitkey 2048
export_pub 03 "$WORK/pub.pem"
echo "signed through p11-kit" > "$WORK/data"
pkcs11-tool --module "$proxy" --token-label e2e --login --pin 1234 --sign -m SHA256-RSA-PKCS --id 03 \
    -i "$WORK/data" -o "$WORK/sig" >/dev/null
openssl dgst -sha256 -verify "$WORK/pub.pem" -signature "$WORK/sig" "$WORK/data"
echo "e2e p11-kit: module listed, signature through the proxy verified"

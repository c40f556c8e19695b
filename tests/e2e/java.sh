# Java 17 SunPKCS11 (openjdk-17-jdk-headless): keytool makes a key pair and a self-signed
# certificate on the token (C_GenerateKeyPair, C_CreateObject of the certificate), jarsigner
# signs a jar with it (multi-part CKM_SHA256_RSA_PKCS), and `jarsigner -verify` checks it.
. "$(dirname "$0")/common.sh"
need java keytool jarsigner jar
slot=$("$FERROHSM_UTIL" show-slots | awk '/^Slot / {s=$2} /Token label: +e2e$/ {print s; exit}')
cat > "$WORK/pkcs11.cfg" <<CFG
name = ferrohsm
library = $M
slot = $slot
CFG
ks=(-keystore NONE -storetype PKCS11 -providerClass sun.security.pkcs11.SunPKCS11 -providerArg "$WORK/pkcs11.cfg" -storepass 1234)
keytool -genkeypair "${ks[@]}" -alias signer -keyalg RSA -keysize 2048 -sigalg SHA256withRSA \
    -dname "CN=ferrohsm e2e" -validity 30 2>&1
keytool -list "${ks[@]}" | grep -q "signer" || { echo "FAIL: keytool does not list the key" >&2; exit 1; }
mkdir -p "$WORK/jar"
echo "hello from a signed jar" > "$WORK/jar/hello.txt"
jar cf "$WORK/app.jar" -C "$WORK/jar" hello.txt
jarsigner "${ks[@]}" -sigalg SHA256withRSA "$WORK/app.jar" signer
out=$(jarsigner -verify -verbose "$WORK/app.jar")
grep -q "jar verified" <<<"$out" || { echo "FAIL: $out" >&2; exit 1; }
echo "e2e java: keytool key and certificate on the token, jar signed and verified"

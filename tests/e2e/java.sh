# Java 17 SunPKCS11 (openjdk-17-jdk-headless): keytool makes a key pair and a self-signed
# certificate on the token (C_GenerateKeyPair, C_CreateObject of the certificate), jarsigner
# signs a jar with it (multi-part CKM_SHA256_RSA_PKCS), and `jarsigner -verify` checks it. The
# same for an EC P-256 key and SHA256withECDSA (CKM_ECDSA over Java's own SHA-256, or
# CKM_ECDSA_SHA256, as SunPKCS11 picks; Java turns r||s into DER); that jar's signature block is
# also checked by OpenSSL (`openssl cms -verify` over the signature file).
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
keytool -genkeypair "${ks[@]}" -alias ecsigner -keyalg EC -groupname secp256r1 -sigalg SHA256withECDSA \
    -dname "CN=ferrohsm e2e ec" -validity 30 2>&1
jar cf "$WORK/app-ec.jar" -C "$WORK/jar" hello.txt
jarsigner "${ks[@]}" -sigalg SHA256withECDSA "$WORK/app-ec.jar" ecsigner
out=$(jarsigner -verify -verbose "$WORK/app-ec.jar")
grep -q "jar verified" <<<"$out" || { echo "FAIL: $out" >&2; exit 1; }
# Independently: OpenSSL checks the PKCS#7 signature block (an ECDSA signature over the .SF file)
# with the certificate it carries.
mkdir -p "$WORK/ec-x" && (cd "$WORK/ec-x" && jar xf "$WORK/app-ec.jar" META-INF)
openssl cms -verify -inform DER -in "$WORK/ec-x/META-INF/ECSIGNER.EC" -content "$WORK/ec-x/META-INF/ECSIGNER.SF" \
    -binary -noverify -out /dev/null
openssl cms -cmsout -print -inform DER -in "$WORK/ec-x/META-INF/ECSIGNER.EC" | grep -q "ecdsa-with-SHA256" \
    || { echo "FAIL: the jar's signature is not SHA256withECDSA" >&2; exit 1; }
echo "e2e java: keytool RSA and EC keys and certificates on the token, jars signed and verified"

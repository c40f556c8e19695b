# The independent side of tests/pqc.rs: pure Python ML-DSA (dilithium-py) and SLH-DSA
# (slh-dsa). Reads one JSON request per line on stdin, answers one JSON line each:
#   {"op": "keys", "alg", "seed"}                  -> {"pk", "sk"}   (ML-DSA from the seed xi)
#   {"op": "sign", "alg", "sk", "msg", "ctx", "prehash"}  -> {"sig"}  (deterministic)
#   {"op": "verify", "alg", "pk", "msg", "ctx", "prehash", "sig"}  -> {"ok"}
# Byte strings are hex; "prehash" is null (pure) or a hashlib name (HashML-DSA/HashSLH-DSA).
# With "api": "library" a pre-hash signature goes through the implementation's own HashML-DSA /
# HashSLH-DSA code (its OIDs, its hashing): dilithium-py's _sign_with_pre_hash and
# _verify_with_pre_hash (SHA-256, SHA-512, SHAKE128), slh-dsa's sign_hash and verify_hash (the
# hash of the set's security category: SHA-256 for SHA2-128, SHA-512 for SHA2-192/256, SHAKE128
# for SHAKE-128, SHAKE256 for SHAKE-192/256). Otherwise M' is built here and signed or verified
# with the internal functions.
import hashlib
import json
import sys

from dilithium_py.ml_dsa import ML_DSA_44, ML_DSA_65, ML_DSA_87
# HashML-DSA objects of each set; the hash is chosen per call, not the SHA-512 of their names.
from dilithium_py.ml_dsa import (HASH_ML_DSA_44_WITH_SHA512, HASH_ML_DSA_65_WITH_SHA512,
                                 HASH_ML_DSA_87_WITH_SHA512)
import slhdsa

ML_DSA = {"ml-dsa-44": ML_DSA_44, "ml-dsa-65": ML_DSA_65, "ml-dsa-87": ML_DSA_87}
HASH_ML_DSA = {"ml-dsa-44": HASH_ML_DSA_44_WITH_SHA512, "ml-dsa-65": HASH_ML_DSA_65_WITH_SHA512,
               "ml-dsa-87": HASH_ML_DSA_87_WITH_SHA512}
# NIST's hashAlgs arc (2.16.840.1.101.3.4.2.x), written out here rather than taken from either
# implementation under test.
HASH_OID_LAST = {"sha256": 1, "sha384": 2, "sha512": 3, "sha224": 4, "sha3_224": 7,
                 "sha3_256": 8, "sha3_384": 9, "sha3_512": 10, "shake_128": 11, "shake_256": 12}
# FIPS 204 and 205 take 256 bits of SHAKE128 and 512 of SHAKE256.
XOF_LEN = {"shake_128": 32, "shake_256": 64}
# dilithium-py's names of the hashes its HashML-DSA has.
DILITHIUM_HASH = {"sha256": "SHA256", "sha512": "SHA512", "shake_128": "SHAKE128"}


def ph(prehash, msg):
    h = hashlib.new(prehash, msg)
    return h.digest(XOF_LEN[prehash]) if prehash in XOF_LEN else h.digest()


def m_prime(msg, ctx, prehash):
    if prehash is None:
        return b"\x00" + bytes([len(ctx)]) + ctx + msg
    oid = bytes([0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, HASH_OID_LAST[prehash]])
    return b"\x01" + bytes([len(ctx)]) + ctx + oid + ph(prehash, msg)


# The hash slh-dsa's sign_hash/verify_hash use for a set ("sha2-128" of "slh-dsa-sha2-128f").
SLH_LIBRARY_HASH = {"sha2-128": "sha256", "sha2-192": "sha512", "sha2-256": "sha512",
                    "shake-128": "shake_128", "shake-192": "shake_256", "shake-256": "shake_256"}


def slh_par(alg):
    # "slh-dsa-sha2-128f" -> slhdsa.sha2_128f
    _, _, family, size = alg.split("-")
    return getattr(slhdsa, f"{family}_{size}")


def answer(r):
    b = lambda k: bytes.fromhex(r.get(k) or "")
    alg = r["alg"]
    msg, ctx, prehash = b("msg"), b("ctx"), r.get("prehash")
    library = r.get("api") == "library"
    if alg in ML_DSA:
        d = ML_DSA[alg]
        if library:
            h = HASH_ML_DSA[alg]
            if r["op"] == "sign":
                return {"sig": h._sign_with_pre_hash(b("sk"), msg, DILITHIUM_HASH[prehash], ctx, True).hex()}
            return {"ok": h._verify_with_pre_hash(b("pk"), msg, b("sig"), DILITHIUM_HASH[prehash], ctx)}
        if r["op"] == "keys":
            pk, sk = d.key_derive(b("seed"))
            return {"pk": pk.hex(), "sk": sk.hex()}
        if r["op"] == "sign":
            return {"sig": d._sign_internal(b("sk"), m_prime(msg, ctx, prehash), bytes(32)).hex()}
        return {"ok": d._verify_internal(b("pk"), m_prime(msg, ctx, prehash), b("sig"))}
    par = slh_par(alg)
    import slhdsa.lowlevel.slhdsa as lowlevel
    if library:
        # The library picks the hash from the set; the request names the one the test expects.
        _, _, family, size = alg.split("-")
        assert SLH_LIBRARY_HASH[f"{family}-{size[:3]}"] == prehash, alg
        if r["op"] == "sign":
            sk = slhdsa.SecretKey.from_digest(b("sk"), par)
            return {"sig": sk.sign_hash(msg, randomize=False, ctx=ctx).hex()}
        pk = slhdsa.PublicKey.from_digest(b("pk"), par)
        return {"ok": bool(pk.verify_hash(msg, b("sig"), ctx=ctx))}
    if r["op"] == "sign":
        sk = slhdsa.SecretKey.from_digest(b("sk"), par)
        return {"sig": lowlevel.sign(m_prime(msg, ctx, prehash), sk.key, par, False).hex()}
    pk = slhdsa.PublicKey.from_digest(b("pk"), par)
    return {"ok": bool(lowlevel.verify(m_prime(msg, ctx, prehash), b("sig"), pk.key, par))}


for line in sys.stdin:
    if line.strip():
        print(json.dumps(answer(json.loads(line))), flush=True)

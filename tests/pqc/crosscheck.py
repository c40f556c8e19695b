# The independent side of tests/pqc.rs: pure Python ML-DSA (dilithium-py) and SLH-DSA
# (slh-dsa). Reads one JSON request per line on stdin, answers one JSON line each:
#   {"op": "keys", "alg", "seed"}                  -> {"pk", "sk"}   (ML-DSA from the seed xi)
#   {"op": "sign", "alg", "sk", "msg", "ctx", "prehash"}  -> {"sig"}  (deterministic)
#   {"op": "verify", "alg", "pk", "msg", "ctx", "prehash", "sig"}  -> {"ok"}
# Byte strings are hex; "prehash" is null (pure) or a hashlib name (HashML-DSA/HashSLH-DSA).
import hashlib
import json
import sys

from dilithium_py.ml_dsa import ML_DSA_44, ML_DSA_65, ML_DSA_87
import slhdsa

ML_DSA = {"ml-dsa-44": ML_DSA_44, "ml-dsa-65": ML_DSA_65, "ml-dsa-87": ML_DSA_87}
# NIST's hashAlgs arc (2.16.840.1.101.3.4.2.x), written out here rather than taken from either
# implementation under test.
HASH_OID_LAST = {"sha256": 1, "sha384": 2, "sha512": 3, "sha224": 4, "sha3_224": 7,
                 "sha3_256": 8, "sha3_384": 9, "sha3_512": 10}


def m_prime(msg, ctx, prehash):
    if prehash is None:
        return b"\x00" + bytes([len(ctx)]) + ctx + msg
    oid = bytes([0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, HASH_OID_LAST[prehash]])
    return b"\x01" + bytes([len(ctx)]) + ctx + oid + hashlib.new(prehash, msg).digest()


def slh_par(alg):
    # "slh-dsa-sha2-128f" -> slhdsa.sha2_128f
    _, _, family, size = alg.split("-")
    return getattr(slhdsa, f"{family}_{size}")


def answer(r):
    b = lambda k: bytes.fromhex(r.get(k) or "")
    alg = r["alg"]
    msg, ctx, prehash = b("msg"), b("ctx"), r.get("prehash")
    if alg in ML_DSA:
        d = ML_DSA[alg]
        if r["op"] == "keys":
            pk, sk = d.key_derive(b("seed"))
            return {"pk": pk.hex(), "sk": sk.hex()}
        if r["op"] == "sign":
            return {"sig": d._sign_internal(b("sk"), m_prime(msg, ctx, prehash), bytes(32)).hex()}
        return {"ok": d._verify_internal(b("pk"), m_prime(msg, ctx, prehash), b("sig"))}
    par = slh_par(alg)
    import slhdsa.lowlevel.slhdsa as lowlevel
    if r["op"] == "sign":
        sk = slhdsa.SecretKey.from_digest(b("sk"), par)
        return {"sig": lowlevel.sign(m_prime(msg, ctx, prehash), sk.key, par, False).hex()}
    pk = slhdsa.PublicKey.from_digest(b("pk"), par)
    return {"ok": bool(lowlevel.verify(m_prime(msg, ctx, prehash), b("sig"), pk.key, par))}


for line in sys.stdin:
    if line.strip():
        print(json.dumps(answer(json.loads(line))), flush=True)

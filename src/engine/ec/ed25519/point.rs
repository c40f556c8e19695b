//! Points of edwards25519 (−x² + y² = 1 + d·x²·y²) for the signature check, in extended
//! coordinates (X:Y:Z:T with x = X/Z, y = Y/Z, x·y = T/Z), with the a = −1 formulas of
//! Hisil, Wong, Carter and Dawson (2008). They are complete on this curve (d is not a square
//! mod p), so no input needs a branch: the identity, equal and opposite points included.
//! Table entries are affine in the Niels form (y + x, y − x, 2d·x·y): a mixed addition is 7M.

use super::field::Fe;
use std::sync::LazyLock;

/// d = −121665/121666, 2d, and √−1 = 2^((p−1)/4), computed once (from their definitions,
/// not transcribed).
struct Constants {
    d: Fe,
    d2: Fe,
    sqrt_m1: Fe,
}

static K: LazyLock<Constants> = LazyLock::new(|| {
    let d = Fe::small(121665).neg().mul(&Fe::small(121666).invert_vartime());
    // (p − 1)/4 = 2^253 − 5.
    let sqrt_m1 = Fe::small(2).pow(&[0xffff_ffff_ffff_fffb, u64::MAX, u64::MAX, 0x1fff_ffff_ffff_ffff]);
    Constants {
        d,
        d2: d.add(&d),
        sqrt_m1,
    }
});

#[derive(Clone, Copy, Debug)]
pub struct Ext {
    pub x: Fe,
    pub y: Fe,
    pub z: Fe,
    pub t: Fe,
}

/// An affine point as (y + x, y − x, 2d·x·y).
#[derive(Clone, Copy, Debug)]
pub struct Niels {
    pub ypx: Fe,
    pub ymx: Fe,
    pub xy2d: Fe,
}

impl Ext {
    pub const IDENTITY: Ext = Ext {
        x: Fe::ZERO,
        y: Fe::ONE,
        z: Fe::ONE,
        t: Fe::ZERO,
    };

    /// The point of a 32-byte RFC 8032 encoding (section 5.1.3), or None if the encoding is
    /// not canonical (y ≥ p, or x = 0 with the sign bit set) or no point has this y. Variable
    /// time: for public points (the key's, the base point).
    pub fn decompress(b: &[u8; 32]) -> Option<Ext> {
        let sign = b[31] >> 7 == 1;
        let y = Fe::from_bytes(b);
        let mut canonical = *b;
        canonical[31] &= 0x7f;
        if y.to_bytes() != canonical {
            return None;
        }
        let yy = y.sqr();
        let u = yy.sub(&Fe::ONE);
        let v = K.d.mul(&yy).add(&Fe::ONE);
        // x = u·v³·(u·v⁷)^((p−5)/8), then fixed by √−1 if v·x² = −u.
        let v3 = v.sqr().mul(&v);
        let uv7 = u.mul(&v3.sqr().mul(&v));
        let mut x =
            u.mul(&v3)
                .mul(&uv7.pow(&[0xffff_ffff_ffff_fffd, u64::MAX, u64::MAX, 0x0fff_ffff_ffff_ffff]));
        let vxx = v.mul(&x.sqr());
        if !vxx.eq_vartime(&u) {
            if !vxx.eq_vartime(&u.neg()) {
                return None;
            }
            x = x.mul(&K.sqrt_m1);
        }
        let zero = x.eq_vartime(&Fe::ZERO);
        if zero && sign {
            return None;
        }
        if x.is_odd() != sign {
            x = x.neg();
        }
        Some(Ext {
            x,
            y,
            z: Fe::ONE,
            t: x.mul(&y),
        })
    }

    /// The RFC 8032 encoding: y with the sign of x in the top bit (one inversion).
    pub fn compress(&self) -> [u8; 32] {
        let zi = self.z.invert_vartime();
        let (x, y) = (self.x.mul(&zi), self.y.mul(&zi));
        let mut out = y.to_bytes();
        out[31] |= (x.is_odd() as u8) << 7;
        out
    }

    /// 2·self (dbl-2008-hwcd with a = −1: 4M + 4S).
    pub fn double(&self) -> Ext {
        let a = self.x.sqr();
        let b = self.y.sqr();
        let zz = self.z.sqr();
        let c = zz.add(&zz);
        let e = self.x.add(&self.y).sqr().sub(&a).sub(&b);
        let g = b.sub(&a);
        let f = g.sub(&c);
        let h = Fe::ZERO.sub(&a).sub(&b);
        Ext {
            x: e.mul(&f),
            y: g.mul(&h),
            z: f.mul(&g),
            t: e.mul(&h),
        }
    }

    /// self + q for an affine q, or self − q when `neg` (madd-2008-hwcd-3: 7M).
    pub fn add_niels(&self, q: &Niels, neg: bool) -> Ext {
        let (qp, qm) = if neg { (&q.ymx, &q.ypx) } else { (&q.ypx, &q.ymx) };
        let a = self.y.sub(&self.x).mul(qm);
        let b = self.y.add(&self.x).mul(qp);
        let c = self.t.mul(&q.xy2d);
        let d = self.z.add(&self.z);
        let (f, g) = if neg {
            (d.add(&c), d.sub(&c))
        } else {
            (d.sub(&c), d.add(&c))
        };
        let e = b.sub(&a);
        let h = b.add(&a);
        Ext {
            x: e.mul(&f),
            y: g.mul(&h),
            z: f.mul(&g),
            t: e.mul(&h),
        }
    }

    /// self + q for any q (add-2008-hwcd-3: 9M), for building tables.
    pub fn add(&self, q: &Ext) -> Ext {
        let a = self.y.sub(&self.x).mul(&q.y.sub(&q.x));
        let b = self.y.add(&self.x).mul(&q.y.add(&q.x));
        let c = self.t.mul(&K.d2).mul(&q.t);
        let zz = self.z.mul(&q.z);
        let d = zz.add(&zz);
        let (e, f, g, h) = (b.sub(&a), d.sub(&c), d.add(&c), b.add(&a));
        Ext {
            x: e.mul(&f),
            y: g.mul(&h),
            z: f.mul(&g),
            t: e.mul(&h),
        }
    }
}

/// The points in affine Niels form, with one inversion for all (Montgomery's trick).
pub fn to_niels(pts: &[Ext]) -> Vec<Niels> {
    let mut prefix = Vec::with_capacity(pts.len());
    let mut acc = Fe::ONE;
    for p in pts {
        prefix.push(acc);
        acc = acc.mul(&p.z);
    }
    let mut inv = acc.invert_vartime();
    let mut out = vec![
        Niels {
            ypx: Fe::ZERO,
            ymx: Fe::ZERO,
            xy2d: Fe::ZERO
        };
        pts.len()
    ];
    for i in (0..pts.len()).rev() {
        let zi = inv.mul(&prefix[i]);
        inv = inv.mul(&pts[i].z);
        let (x, y) = (pts[i].x.mul(&zi), pts[i].y.mul(&zi));
        out[i] = Niels {
            ypx: y.add(&x).carry(),
            ymx: y.sub(&x),
            xy2d: x.mul(&y).mul(&K.d2),
        };
    }
    out
}

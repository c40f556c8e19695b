//! P-256 points in Jacobian coordinates (x = X/Z², y = Y/Z³, Z = 0 the identity) over the
//! dedicated field, with the a = -3 doubling (dbl-2001-b, 3M + 5S) and the mixed addition of
//! an affine point (madd-2004-hmv, 8M + 3S), which are not complete. madd-2007-bl (7M + 4S)
//! has one product fewer but five more field additions and doublings; here additions are
//! assembly of about a tenth of a product each, and 8M + 3S made a chain of additions 159 ->
//! 141 ns (benches/p256.rs, Xeon 6/167).
//! `add_affine_ct` is the branch-free formula and reports the one case it gets wrong for the
//! signer to mend with a select (see `comb`); `double_vartime`/`add_affine_vartime` branch
//! on their exceptional cases, for the check, whose inputs are public.

use super::field::{Arith, Fe};

/// A table entry: an affine point's x then y limbs (Montgomery form), on a cache line of its
/// own. Unaligned, a 64-byte entry straddles two lines (the allocator aligns to 16): twice
/// the lines for each lookup of the check and a split load for half of the comb scan's loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Entry(pub [u64; 8]);

impl Entry {
    pub fn new<A: Arith>(p: &Affine<A>) -> Entry {
        let mut e = [0u64; 8];
        e[..4].copy_from_slice(&p.x.0);
        e[4..].copy_from_slice(&p.y.0);
        Entry(e)
    }

    /// The point, its y negated when `neg` is true (variable time: public entries only).
    #[inline(always)]
    pub fn affine_vartime<A: Arith>(&self, neg: bool) -> Affine<A> {
        let e = &self.0;
        let x = Fe::from_limbs([e[0], e[1], e[2], e[3]]);
        let y = Fe::from_limbs([e[4], e[5], e[6], e[7]]);
        Affine {
            x,
            y: if neg { y.neg() } else { y },
        }
    }
}

/// An affine point (x, y) in Montgomery form; never the identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Affine<A: Arith> {
    pub x: Fe<A>,
    pub y: Fe<A>,
}

#[derive(Clone, Copy, Debug)]
pub struct Jac<A: Arith> {
    pub x: Fe<A>,
    pub y: Fe<A>,
    pub z: Fe<A>,
}

impl<A: Arith> Jac<A> {
    pub const IDENTITY: Jac<A> = Jac {
        x: Fe::ZERO,
        y: Fe::ONE,
        z: Fe::ZERO,
    };

    pub fn from_affine(p: &Affine<A>) -> Jac<A> {
        Jac {
            x: p.x,
            y: p.y,
            z: Fe::ONE,
        }
    }

    /// 2·P, branch-free; the identity doubles to a point with Z = 0 (the identity), and no
    /// point of P-256 has y = 0 (the group has odd order), so it is exact everywhere.
    #[inline(always)]
    pub fn double(&self) -> Jac<A> {
        let delta = self.z.sqr();
        let gamma = self.y.sqr();
        let beta = self.x.mul(&gamma);
        let t = self.x.sub(&delta).mul(&self.x.add(&delta));
        let alpha = t.dbl().add(&t);
        let beta4 = beta.dbl().dbl();
        let x3 = alpha.sqr().sub(&beta4.dbl());
        let z3 = self.y.add(&self.z).sqr().sub(&gamma).sub(&delta);
        let g2 = gamma.sqr().dbl();
        let y3 = alpha.mul(&beta4.sub(&x3)).sub(&g2.dbl().dbl());
        Jac { x: x3, y: y3, z: z3 }
    }

    /// P + Q for an affine Q, branch-free. Exact unless P is the identity or P = ±Q: P = -Q
    /// gives Z = 0 (the identity, which is right), P = Q gives Z = 0 too (wrong: 2Q), and the
    /// second value is all ones exactly in that case (H = 0 and R = 0), else 0.
    #[inline(always)]
    pub fn add_affine_ct(&self, q: &Affine<A>) -> (Jac<A>, u64) {
        let z1z1 = self.z.sqr();
        let u2 = q.x.mul(&z1z1);
        let s2 = q.y.mul(&self.z).mul(&z1z1);
        let h = u2.sub(&self.x);
        let r = s2.sub(&self.y);
        let same = h.is_zero_mask() & r.is_zero_mask();
        let hh = h.sqr();
        let hhh = h.mul(&hh);
        let v = self.x.mul(&hh);
        let x3 = r.sqr().sub(&hhh).sub(&v.dbl());
        let y3 = r.mul(&v.sub(&x3)).sub(&self.y.mul(&hhh));
        let z3 = self.z.mul(&h);
        (Jac { x: x3, y: y3, z: z3 }, same)
    }

    /// P + Q for Jacobian P and Q (add-2007-bl, 11M + 5S), branch-free. Exact when neither is
    /// the identity and P ≠ ±Q: the tables' builder (`check::KeyTable`) adds only m·P + 2·P
    /// for small odd m.
    #[inline(always)]
    pub fn add_ct(&self, q: &Jac<A>) -> Jac<A> {
        let z1z1 = self.z.sqr();
        let z2z2 = q.z.sqr();
        let u1 = self.x.mul(&z2z2);
        let u2 = q.x.mul(&z1z1);
        let s1 = self.y.mul(&q.z).mul(&z2z2);
        let s2 = q.y.mul(&self.z).mul(&z1z1);
        let h = u2.sub(&u1);
        let i = h.dbl().sqr();
        let j = h.mul(&i);
        let r = s2.sub(&s1).dbl();
        let v = u1.mul(&i);
        let x3 = r.sqr().sub(&j).sub(&v.dbl());
        let y3 = r.mul(&v.sub(&x3)).sub(&s1.mul(&j).dbl());
        let z3 = self.z.add(&q.z).sqr().sub(&z1z1).sub(&z2z2).mul(&h);
        Jac { x: x3, y: y3, z: z3 }
    }

    /// a if mask is 0, b if all ones.
    #[inline(always)]
    pub fn select(mask: u64, a: &Jac<A>, b: &Jac<A>) -> Jac<A> {
        Jac {
            x: Fe::select(mask, &a.x, &b.x),
            y: Fe::select(mask, &a.y, &b.y),
            z: Fe::select(mask, &a.z, &b.z),
        }
    }

    pub fn is_identity_vartime(&self) -> bool {
        self.z.is_zero_vartime()
    }

    /// 2·P, variable time.
    pub fn double_vartime(&self) -> Jac<A> {
        if self.is_identity_vartime() {
            return *self;
        }
        self.double()
    }

    /// P + Q for an affine Q, every case, variable time (public points only).
    pub fn add_affine_vartime(&self, q: &Affine<A>) -> Jac<A> {
        if self.is_identity_vartime() {
            return Jac::from_affine(q);
        }
        let (sum, same) = self.add_affine_ct(q);
        if same != 0 {
            return Jac::from_affine(q).double();
        }
        sum
    }

    /// The affine x-coordinate's canonical bytes (X·Z⁻², Z⁻¹ by the constant-time divsteps
    /// inversion); zero for the identity.
    pub fn x_affine(&self) -> [u8; 32] {
        let zi = self.z.invert();
        self.x.mul(&zi.sqr()).to_be()
    }

    /// `x_affine` with Z⁻¹ by the blinded inversion (`Fe::invert_blinded`, factor `b`).
    pub fn x_affine_blinded(&self, b: &Fe<A>) -> [u8; 32] {
        let zi = self.z.invert_blinded(b);
        self.x.mul(&zi.sqr()).to_be()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use elliptic_curve::group::Group as _;
    use elliptic_curve::point::AffineCoordinates;
    use p256::{AffinePoint, ProjectivePoint, Scalar};

    fn ours<A: Arith>(p: &AffinePoint) -> Affine<A> {
        Affine {
            x: Fe::from_be(&p.x().into()).unwrap(),
            y: Fe::from_be(&p.y().into()).unwrap(),
        }
    }

    /// Affine bytes (x, y) of a Jacobian point, or None for the identity.
    fn affine_bytes<A: Arith>(p: &Jac<A>) -> Option<([u8; 32], [u8; 32])> {
        if p.is_identity_vartime() {
            return None;
        }
        let zi = p.z.invert();
        let zi2 = zi.sqr();
        Some((p.x.mul(&zi2).to_be(), p.y.mul(&zi2).mul(&zi).to_be()))
    }

    fn theirs(p: &ProjectivePoint) -> Option<([u8; 32], [u8; 32])> {
        if bool::from(p.is_identity()) {
            return None;
        }
        let a = p.to_affine();
        Some((a.x().into(), a.y().into()))
    }

    fn random_point() -> ProjectivePoint {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).unwrap();
        ProjectivePoint::GENERATOR
            * <Scalar as elliptic_curve::ops::Reduce<p256::FieldBytes>>::reduce(&b.into())
    }

    /// Doubling and mixed addition equal the p256 crate's on random points, with P given a
    /// random Z (not 1) so the Jacobian arithmetic is exercised; and the edges: P + P (the
    /// reported case, mended by the vartime form), P + (-P) (the identity), O + Q, 2·O.
    pub(crate) fn agrees_with_p256_crate<A: Arith>() {
        for _ in 0..100 {
            let (p, q) = (random_point(), random_point());
            let (pa, qa) = (ours::<A>(&p.to_affine()), ours::<A>(&q.to_affine()));
            // P with Z = t: (t²x, t³y, t).
            let t = Fe::<A>::from_be(&{
                let mut b = [0u8; 32];
                getrandom::fill(&mut b[1..]).unwrap();
                b
            })
            .unwrap();
            let pj = Jac {
                x: pa.x.mul(&t.sqr()),
                y: pa.y.mul(&t.sqr()).mul(&t),
                z: t,
            };
            assert_eq!(affine_bytes(&pj.double()), theirs(&p.double()));
            let (sum, same) = pj.add_affine_ct(&qa);
            assert_eq!(same, 0);
            assert_eq!(affine_bytes(&sum), theirs(&(p + q)));
            assert_eq!(affine_bytes(&pj.add_affine_vartime(&qa)), theirs(&(p + q)));
            // Jacobian + Jacobian, Q with another Z, in both orders.
            let u = t.sqr().add(&Fe::ONE);
            let qj = Jac {
                x: qa.x.mul(&u.sqr()),
                y: qa.y.mul(&u.sqr()).mul(&u),
                z: u,
            };
            assert_eq!(affine_bytes(&pj.add_ct(&qj)), theirs(&(p + q)));
            assert_eq!(affine_bytes(&qj.add_ct(&pj)), theirs(&(p + q)));
            // P + P: reported, and mended by the vartime form.
            let (_, same) = pj.add_affine_ct(&pa);
            assert_eq!(same, u64::MAX);
            assert_eq!(affine_bytes(&pj.add_affine_vartime(&pa)), theirs(&p.double()));
            // P + (-P) = O.
            let neg = Affine {
                x: pa.x,
                y: pa.y.neg(),
            };
            let (o, same) = pj.add_affine_ct(&neg);
            assert_eq!(same, 0);
            assert!(o.is_identity_vartime());
            assert!(pj.add_affine_vartime(&neg).is_identity_vartime());
            // O + Q = Q, 2·O = O.
            assert_eq!(
                affine_bytes(&Jac::<A>::IDENTITY.add_affine_vartime(&qa)),
                theirs(&q)
            );
            assert!(Jac::<A>::IDENTITY.double().is_identity_vartime());
            assert_eq!(Jac::from_affine(&qa).x_affine(), theirs(&q).unwrap().0);
        }
    }

    #[test]
    fn portable_agrees_with_p256_crate() {
        agrees_with_p256_crate::<super::super::field::Portable>();
    }
}

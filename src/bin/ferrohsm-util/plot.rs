//! `bench --plot`: signatures/s against client threads, one line per module, and
//! `openssl speed -multi <cores>` as a horizontal reference line, drawn as an SVG (plotters'
//! SVG backend writes text as SVG text, so no font file is needed). Thread counts run on a
//! doubling scale (1, 2, 4 … 64), the axis a log scale of base 2.

use ferrohsm::cli::module::Result;
use plotters::prelude::*;
use std::path::Path;

/// One module's figures: its legend name and (client threads, signatures/s) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(usize, f64)>,
}

/// What `openssl speed` calls the algorithm of a bench key, and how its result line starts
/// (`rsa 2048 bits`, `256 bits ecdsa (nistp256)`, `253 bits EdDSA (Ed25519)`).
fn openssl_names(key: &str, bits: u64) -> Option<(String, String)> {
    Some(match key {
        "ECDSA-P256" => ("ecdsap256".into(), "(nistp256)".into()),
        "ECDSA-P384" => ("ecdsap384".into(), "(nistp384)".into()),
        "Ed25519" => ("ed25519".into(), "(Ed25519)".into()),
        k if k.starts_with("RSA-") => (format!("rsa{bits}"), format!("rsa {bits} bits")),
        _ => return None,
    })
}

/// `openssl speed -multi cores` sign/s for the key `bench` names `key` (RSA-2048, ECDSA-P256 …),
/// or None when openssl is missing or prints no figure. The sign/s column is the second last
/// of the result line in every OpenSSL 3 release.
pub fn openssl_multi(key: &str, bits: u64, seconds: f64, cores: usize) -> Option<f64> {
    let (alg, label) = openssl_names(key, bits)?;
    let out = std::process::Command::new("openssl")
        .arg("speed")
        .args(["-seconds", &(seconds.ceil() as u64).max(1).to_string()])
        .args(["-multi", &cores.to_string(), &alg])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains(&label) && !l.starts_with('+'))?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    fields.get(fields.len().checked_sub(2)?)?.parse().ok()
}

/// The CPU the figures come from, with the number of cores.
pub fn cpu() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{}, {cores} cores", crate::speed::cpu_model())
}

/// Draws `series` (and the openssl line, if any) to the SVG file `path`.
pub fn draw(path: &Path, title: &str, series: &[Series], openssl: Option<(&str, f64)>) -> Result<()> {
    let threads = || series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (lo, hi) = (threads().min().unwrap_or(1), threads().max().unwrap_or(1));
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(openssl.map(|o| o.1))
        .fold(1.0, f64::max)
        * 1.15;
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d((lo as f64..hi as f64).log_scale().base(2.0), 0.0..top)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .max_light_lines(1)
        .x_desc("client threads (one session each)")
        .y_desc("signatures/s")
        .x_label_formatter(&|x| format!("{}", x.round()))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = s.points.iter().map(|&(t, v)| (t as f64, v)).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| fail(&e))?;
    }
    if let Some((name, v)) = openssl {
        let grey = RGBColor(90, 90, 90);
        chart
            .draw_series(LineSeries::new(
                [(lo as f64, v), (hi as f64, v)],
                ShapeStyle::from(&grey).stroke_width(1),
            ))
            .map_err(|e| fail(&e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_names_every_bench_key() {
        for (key, alg) in [
            ("RSA-2048", "rsa2048"),
            ("ECDSA-P256", "ecdsap256"),
            ("ECDSA-P384", "ecdsap384"),
            ("Ed25519", "ed25519"),
        ] {
            assert_eq!(openssl_names(key, 2048).unwrap().0, alg);
        }
        assert!(openssl_names("DSA-1024", 1024).is_none());
    }
}

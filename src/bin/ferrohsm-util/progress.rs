//! Progress of the long-running commands (speed, bench, migrate-softhsm, copy-store): a bar on
//! stderr when stderr is a terminal, nothing at all in pipes, files and CI logs, so that a
//! script reading the output or the errors sees only results (indicatif hides a bar whose
//! target is not a terminal).

use indicatif::{ProgressBar, ProgressStyle};

/// What a bar shows: the command, the bar, steps done and due, the current step, time taken.
const TEMPLATE: &str = "{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})";

/// A bar over `len` steps, named `what`; the current step goes in its message.
pub fn bar(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    // TEMPLATE is a constant: it parses, or the unit test below fails.
    if let Ok(style) = ProgressStyle::with_template(TEMPLATE) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_string());
    bar
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_template_parses() {
        assert!(indicatif::ProgressStyle::with_template(super::TEMPLATE).is_ok());
    }
}
